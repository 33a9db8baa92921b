#!/usr/bin/env bash
# LocalStack init hook (ready stage): creates agentlane's DynamoDB table and SQS FIFO queues,
# exactly as `agentlane setup-aws` (shared/aws/src/setup.rs) and infra/template.yaml define them:
#   table  PK/SK (S), on-demand, TTL on expiresAt,
#          sparse GSIs `processing` (procPk S / procAt N), `cronDue` (dueBucket S / dueAt N),
#          `pending` (pendPk S / pendAt N), `sessions` (sessTenant S / updatedAt N) and
#          `sessionRuns` (runSession S / sessionSeq N),
#          projection ALL;
#   queues <name>.fifo with explicit deduplication ids, redriving to <name>-dlq.fifo;
#   KMS key of tenant secrets, symmetric, rotated, aliased alias/<table>-secrets.
# Idempotent: what exists is left as it is.
#
# Inside the LocalStack container `awslocal` is on PATH. Elsewhere it falls back to the AWS CLI
# against $AWS_ENDPOINT_URL (default http://127.0.0.1:4566) with test credentials, so the same
# script also prepares the moto emulator of start-emulator.sh:
#   AWS_ENDPOINT_URL=http://127.0.0.1:4566 bash localstack/init/ready.d/10-agentlane.sh
# It never talks to real AWS.
#
# Names and numbers follow agentlane's variables (defaults = setup.rs's defaults):
#   AGENTLANE_TABLE (agentlane), AGENTLANE_QUEUE_NAME (agentlane-turns.fifo),
#   AGENTLANE_DLQ_NAME (<queue stem>-dlq.fifo), AGENTLANE_MAX_RECEIVE_COUNT (250),
#   AGENTLANE_VISIBILITY_TIMEOUT (60 s).
set -euo pipefail

TABLE=${AGENTLANE_TABLE:-agentlane}
QUEUE=${AGENTLANE_QUEUE_NAME:-agentlane-turns.fifo}
DLQ=${AGENTLANE_DLQ_NAME:-${QUEUE%.fifo}-dlq.fifo}
MAX_RECEIVE=${AGENTLANE_MAX_RECEIVE_COUNT:-250}
VISIBILITY=${AGENTLANE_VISIBILITY_TIMEOUT:-60}
RETENTION=1209600 # 14 days, SQS's maximum
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}

if ! command -v awslocal >/dev/null 2>&1; then
  awslocal() {
    env -u AWS_PROFILE -u AWS_SESSION_TOKEN AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
      aws --endpoint-url "${AWS_ENDPOINT_URL:-http://127.0.0.1:4566}" "$@"
  }
fi

say() { echo "agentlane init: $*"; }

# --- DynamoDB table -------------------------------------------------------------------------
if awslocal dynamodb describe-table --table-name "$TABLE" >/dev/null 2>&1; then
  say "table $TABLE exists"
else
  awslocal dynamodb create-table \
    --table-name "$TABLE" \
    --billing-mode PAY_PER_REQUEST \
    --attribute-definitions \
      AttributeName=PK,AttributeType=S AttributeName=SK,AttributeType=S \
      AttributeName=procPk,AttributeType=S AttributeName=procAt,AttributeType=N \
      AttributeName=dueBucket,AttributeType=S AttributeName=dueAt,AttributeType=N \
      AttributeName=pendPk,AttributeType=S AttributeName=pendAt,AttributeType=N \
      AttributeName=sessTenant,AttributeType=S AttributeName=updatedAt,AttributeType=N \
      AttributeName=runSession,AttributeType=S AttributeName=sessionSeq,AttributeType=N \
    --key-schema AttributeName=PK,KeyType=HASH AttributeName=SK,KeyType=RANGE \
    --global-secondary-indexes '[
      {"IndexName": "processing",
       "KeySchema": [{"AttributeName": "procPk", "KeyType": "HASH"},
                     {"AttributeName": "procAt", "KeyType": "RANGE"}],
       "Projection": {"ProjectionType": "ALL"}},
      {"IndexName": "cronDue",
       "KeySchema": [{"AttributeName": "dueBucket", "KeyType": "HASH"},
                     {"AttributeName": "dueAt", "KeyType": "RANGE"}],
       "Projection": {"ProjectionType": "ALL"}},
      {"IndexName": "pending",
       "KeySchema": [{"AttributeName": "pendPk", "KeyType": "HASH"},
                     {"AttributeName": "pendAt", "KeyType": "RANGE"}],
       "Projection": {"ProjectionType": "ALL"}},
      {"IndexName": "sessions",
       "KeySchema": [{"AttributeName": "sessTenant", "KeyType": "HASH"},
                     {"AttributeName": "updatedAt", "KeyType": "RANGE"}],
       "Projection": {"ProjectionType": "ALL"}},
      {"IndexName": "sessionRuns",
       "KeySchema": [{"AttributeName": "runSession", "KeyType": "HASH"},
                     {"AttributeName": "sessionSeq", "KeyType": "RANGE"}],
       "Projection": {"ProjectionType": "ALL"}}]' \
    >/dev/null
  awslocal dynamodb wait table-exists --table-name "$TABLE"
  say "created table $TABLE"
fi

ttl=$(awslocal dynamodb describe-time-to-live --table-name "$TABLE" \
  --query 'TimeToLiveDescription.[TimeToLiveStatus,AttributeName]' --output text)
case "$ttl" in
  ENABLED*expiresAt | ENABLING*expiresAt) ;;
  ENABLED* | ENABLING*)
    echo "agentlane init: table $TABLE has TTL on another attribute ($ttl); agentlane needs expiresAt" >&2
    exit 1
    ;;
  *)
    awslocal dynamodb update-time-to-live --table-name "$TABLE" \
      --time-to-live-specification Enabled=true,AttributeName=expiresAt >/dev/null
    say "enabled TTL on expiresAt"
    ;;
esac

# --- SQS FIFO queues ------------------------------------------------------------------------
queue_url() { awslocal sqs get-queue-url --queue-name "$1" --query QueueUrl --output text 2>/dev/null; }

if dlq_url=$(queue_url "$DLQ"); then
  say "queue $DLQ exists"
else
  dlq_url=$(awslocal sqs create-queue --queue-name "$DLQ" --query QueueUrl --output text \
    --attributes "FifoQueue=true,ContentBasedDeduplication=false,MessageRetentionPeriod=$RETENTION")
  say "created queue $DLQ"
fi

if queue_url "$QUEUE" >/dev/null; then
  say "queue $QUEUE exists"
else
  dlq_arn=$(awslocal sqs get-queue-attributes --queue-url "$dlq_url" \
    --attribute-names QueueArn --query Attributes.QueueArn --output text)
  # RedrivePolicy is a JSON document inside a JSON string value.
  redrive="{\\\"deadLetterTargetArn\\\":\\\"$dlq_arn\\\",\\\"maxReceiveCount\\\":$MAX_RECEIVE}"
  awslocal sqs create-queue --queue-name "$QUEUE" --query QueueUrl --output text --attributes "{
    \"FifoQueue\": \"true\",
    \"ContentBasedDeduplication\": \"false\",
    \"DeduplicationScope\": \"messageGroup\",
    \"FifoThroughputLimit\": \"perMessageGroupId\",
    \"MessageRetentionPeriod\": \"$RETENTION\",
    \"VisibilityTimeout\": \"$VISIBILITY\",
    \"RedrivePolicy\": \"$redrive\"}" >/dev/null
  say "created queue $QUEUE (dead letters to $DLQ after $MAX_RECEIVE receives)"
fi

# --- KMS key of tenant secrets --------------------------------------------------------------
# Symmetric, rotation on, aliased alias/<table>-secrets (setup-aws's name; `.` becomes `-`):
# serve on this emulator with AGENTLANE_SECRETS_KMS_KEY=alias/<table>-secrets.
ALIAS="alias/$(printf '%s' "$TABLE" | tr -c 'A-Za-z0-9_-' '-')-secrets"
if awslocal kms describe-key --key-id "$ALIAS" >/dev/null 2>&1; then
  say "KMS key $ALIAS exists"
else
  key_id=$(awslocal kms create-key --key-spec SYMMETRIC_DEFAULT --key-usage ENCRYPT_DECRYPT \
    --description "agentlane tenant secrets (table $TABLE)" --query KeyMetadata.KeyId --output text)
  awslocal kms enable-key-rotation --key-id "$key_id"
  awslocal kms create-alias --alias-name "$ALIAS" --target-key-id "$key_id"
  say "created KMS key $ALIAS (set AGENTLANE_SECRETS_KMS_KEY=$ALIAS)"
fi

"""Checks of infra/template.yaml, run by infra/validate.sh inside its pinned venv.

  checks.py translate TEMPLATE OUT.json     SAM -> CloudFormation, offline
  checks.py structure TEMPLATE OUT.json     facts a reviewer checks (exit 1 on any failure)
  checks.py selftest TEMPLATE WORKDIR       `structure` rejects templates broken on purpose
  checks.py emulator TEMPLATE ENDPOINT TABLE QUEUE DLQ
                                            the resources the LocalStack init hook created on an
                                            emulator match the template's table and queues

Nothing here calls AWS: the SAM translator gets placeholder S3 code locations (what `sam
package` would write) and a managed-policy loader that refuses to be used (the template names
no managed policy, so SAM never needs AWS's list).
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from pathlib import Path
from typing import Any

# The translator's metrics go to a dummy publisher; only its "unpublished metrics" warning
# would reach stderr.
logging.getLogger("samtranslator").setLevel(logging.ERROR)

ROOT = Path(__file__).resolve().parent.parent
RUNNER_TIMEOUT_LIMIT = 900  # Lambda's maximum, seconds
MAX_RUN_SECONDS = 48 * 3600  # SPEC §8: runs may last up to 48 h by default
API_GATEWAY_LIMIT_MS = 30_000  # HTTP API integration timeout ceiling
BINARIES = {
    "IngressFunction": "agentlane-ingress",
    # the same binary in streaming mode behind a Function URL (README "Streaming on AWS")
    "IngressStreamFunction": "agentlane-ingress",
    "RunnerFunction": "agentlane-runner",
    "CronFunction": "agentlane-cron",
}
# Variables that name where provider keys are (an ARN, a parameter path), never a key: every
# function reads the keys themselves at init (SPEC §13, README "Keys").
SECRET_REFERENCE_ENV = {
    "AGENTLANE_PROVIDER_KEYS_SECRET_ARN": "ProviderKeysSecretArn",
    "AGENTLANE_PROVIDER_KEYS_SSM_PATH": "ProviderKeysSsmPath",
}
# Non-secret settings whose names look secret-ish.
# The CA bundle of provided.al2023 (what rustls-native-certs' probe would pick there); named in
# SSL_CERT_FILE so that a cold start does not scan the certificate directories as well.
AL2023_CA_BUNDLE = "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"
NOT_SECRET_ENV = {"AGENTLANE_API_KEY_CACHE_TTL_MS", "AGENTLANE_SECRETS_KMS_KEY"}
# Tenant secrets' KMS key (`SecretsKey`): what each role may do with it, and nothing else may.
# The ingress seals (makes data keys), the runner opens (decrypts them); each grant on that
# key's ARN only, its encryption context limited to the tenant and the secret's name.
TENANT_SECRET_KEY = "SecretsKey"
TENANT_SECRET_ACTIONS = {"IngressRole": {"kms:GenerateDataKey"}, "RunnerRole": {"kms:Decrypt"}}
TENANT_SECRET_CONTEXT = ["tenant", "secret"]
# The provider-key reads each role may make, beyond logs, sqs and dynamodb: action → the
# parameter its resource is built from.
SECRET_ACTIONS = {
    "secretsmanager:GetSecretValue": "ProviderKeysSecretArn",
    "ssm:GetParametersByPath": "ProviderKeysSsmPath",
    "kms:Decrypt": "ProviderKeysKmsKeyArn",
}
SQS_CONSUMER = {
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes",
}
DYNAMODB_ITEM_ACTIONS = {
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:Query",
    "dynamodb:BatchGetItem",
    # item-level too (each put or delete is authorised per item, LeadingKeys included): the
    # ingress deletes a session's runs, events and transcript with it
    "dynamodb:BatchWriteItem",
}


# ----------------------------------------------------------------------------- loading


def load_sam(path: str) -> dict[str, Any]:
    """The template as plain JSON-like data (short-form tags become Fn:: dicts)."""
    from cfnlint.decode import decode

    template, matches = decode(path)
    if matches or template is None:
        raise SystemExit(f"cannot parse {path}: {matches}")
    return json.loads(json.dumps(template))


class RefusingPolicyLoader:
    """Managed-policy loader for the translator that needs no AWS call: it must not be used."""

    def load(self) -> dict[str, str]:
        raise RuntimeError(
            "the template names an AWS managed policy; the translator would "
            "need AWS to resolve it (name it by ARN, or better, write the policy)"
        )


def translate(src: str, out: str) -> None:
    from samtranslator.translator.transform import transform

    template = load_sam(src)
    # `sam build` + `sam package` replace each local CodeUri by the uploaded artifact.
    globals_fn = template.get("Globals", {}).get("Function", {})
    if "CodeUri" in globals_fn:
        globals_fn["CodeUri"] = "s3://agentlane-validate-artifacts/code.zip"
    for name, res in template["Resources"].items():
        if res["Type"] == "AWS::Serverless::Function" and "CodeUri" in res.get("Properties", {}):
            res["Properties"]["CodeUri"] = f"s3://agentlane-validate-artifacts/{name}.zip"
    # Parameters without a default need a value, as `sam deploy` would ask for.
    values: dict[str, str] = {}
    translated = transform(template, values, RefusingPolicyLoader())
    Path(out).write_text(json.dumps(translated, indent=1, sort_keys=True) + "\n")
    kinds: dict[str, int] = {}
    for res in translated["Resources"].values():
        kinds[res["Type"]] = kinds.get(res["Type"], 0) + 1
    print("translated: " + ", ".join(f"{n} {t}" for t, n in sorted(kinds.items())))


# ----------------------------------------------------------------------------- helpers


class Checker:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.count = 0

    def check(self, ok: bool, what: str) -> bool:
        self.count += 1
        if not ok:
            self.failures.append(what)
            print(f"  FAIL {what}")
        return ok


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def param(template: dict[str, Any], value: Any) -> dict[str, Any] | None:
    """The parameter a `{"Ref": P}` names, or None."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return template.get("Parameters", {}).get(value["Ref"])
    return None


def default(template: dict[str, Any], value: Any) -> Any:
    """A literal, or the default of the parameter it references."""
    p = param(template, value)
    if p is not None:
        return p.get("Default")
    return value


def bounds(template: dict[str, Any], value: Any) -> tuple[float, float]:
    """(min, max) a value can take: a literal, or a Number parameter's MinValue/MaxValue."""
    p = param(template, value)
    if p is None:
        return float(value), float(value)
    if "AllowedValues" in p:
        vals = [float(v) for v in p["AllowedValues"]]
        return min(vals), max(vals)
    return float(p.get("MinValue", -math.inf)), float(p.get("MaxValue", math.inf))


def getatt(value: Any) -> tuple[str, str] | None:
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        att = value["Fn::GetAtt"]
        return tuple(att.split(".", 1)) if isinstance(att, str) else (att[0], att[1])
    return None


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def is_dynamic_secret(value: Any) -> bool:
    """A Secrets Manager dynamic reference, possibly behind Fn::If / AWS::NoValue."""
    if isinstance(value, dict) and "Fn::If" in value:
        branches = value["Fn::If"][1:]
        return all(is_dynamic_secret(b) or b == {"Ref": "AWS::NoValue"} for b in branches) and any(
            is_dynamic_secret(b) for b in branches
        )
    if isinstance(value, dict) and "Fn::Sub" in value:
        value = value["Fn::Sub"]
    return isinstance(value, str) and value.startswith("{{resolve:secretsmanager:")


# ----------------------------------------------------------------------------- Rust source


def rust_sources() -> str:
    """All of shared/aws/src, so the check survives the adapter's files being reorganised."""
    files = sorted((ROOT / "shared/aws/src").rglob("*.rs"))
    if not files:
        raise SystemExit("shared/aws/src has no Rust sources: cannot cross-check the table design")
    return "\n".join(f.read_text() for f in files)


def rust_table_design() -> dict[str, Any]:
    """Names the AWS adapter uses (shared/aws), the source of truth for the table."""
    src = rust_sources()
    consts = dict(re.findall(r'pub const (\w+): &str = "([^"]+)";', src))
    attrs = dict(re.findall(r'attribute\(\s*"(\w+)",\s*ScalarAttributeType::(\w)\s*\)', src))
    keys = re.findall(r'\.key_schema\(\s*key\(\s*"(\w+)",\s*KeyType::(\w+)\s*\)', src)
    indexes = {
        consts.get(c, c): (h, r)
        for c, h, r in re.findall(r'sparse_index\(\s*(\w+),\s*"(\w+)",\s*"(\w+)",?\s*\)', src)
    }
    receive = re.search(r"pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = (\d+);", src)
    return {
        "attributes": attrs,
        "keys": [(n, t.upper()) for n, t in keys],
        "indexes": indexes,
        "ttl": consts.get("TTL_ATTRIBUTE"),
        "max_receive": int(receive.group(1)) if receive else None,
        "queue": consts.get("DEFAULT_QUEUE_NAME"),
        "table": consts.get("DEFAULT_TABLE"),
    }


def template_table_design(table: dict[str, Any]) -> dict[str, Any]:
    props = table["Properties"]
    return {
        "attributes": {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]},
        "keys": [(k["AttributeName"], k["KeyType"]) for k in props["KeySchema"]],
        "indexes": {
            g["IndexName"]: tuple(k["AttributeName"] for k in g["KeySchema"])
            for g in props.get("GlobalSecondaryIndexes", [])
        },
        "projections": {
            g["IndexName"]: g["Projection"]["ProjectionType"] for g in props.get("GlobalSecondaryIndexes", [])
        },
        "ttl": props.get("TimeToLiveSpecification", {}).get("AttributeName")
        if props.get("TimeToLiveSpecification", {}).get("Enabled") is True
        else None,
    }


# ----------------------------------------------------------------------------- structure


def check_storage(c: Checker, sam: dict[str, Any]) -> None:
    tables = of_type(sam, "AWS::DynamoDB::Table")
    if not c.check(list(tables) == ["Table"], f"exactly one DynamoDB table named Table: {list(tables)}"):
        return
    table = tables["Table"]
    props = table["Properties"]
    c.check(props.get("BillingMode") == "PAY_PER_REQUEST", "table is on-demand")
    c.check(table.get("DeletionPolicy") == "Retain", "table survives stack deletion (Retain)")
    mine = template_table_design(table)
    rust = rust_table_design()
    c.check(
        mine["keys"] == rust["keys"] == [("PK", "HASH"), ("SK", "RANGE")],
        f"key schema PK/SK as in setup.rs: template {mine['keys']} rust {rust['keys']}",
    )
    c.check(
        mine["attributes"] == rust["attributes"],
        f"attribute definitions as in setup.rs: template {mine['attributes']} rust {rust['attributes']}",
    )
    c.check(
        mine["indexes"] == rust["indexes"] and len(rust["indexes"]) == 5,
        f"GSIs as in setup.rs: template {mine['indexes']} rust {rust['indexes']}",
    )
    c.check(set(mine["projections"].values()) == {"ALL"}, f"GSI projections ALL: {mine['projections']}")
    c.check(
        mine["ttl"] is not None and mine["ttl"] == rust["ttl"],
        f"TTL enabled on {rust['ttl']}: template {mine['ttl']}",
    )


def check_queues(c: Checker, sam: dict[str, Any], runner_timeout: float) -> None:
    queues = of_type(sam, "AWS::SQS::Queue")
    if not c.check(set(queues) == {"TurnQueue", "TurnDlq"}, f"queues TurnQueue + TurnDlq: {list(queues)}"):
        return
    q, dlq = queues["TurnQueue"]["Properties"], queues["TurnDlq"]["Properties"]
    for name, props in (("TurnQueue", q), ("TurnDlq", dlq)):
        c.check(props.get("FifoQueue") is True, f"{name} is FIFO")
        c.check(
            props.get("ContentBasedDeduplication") is False,
            f"{name}: ContentBasedDeduplication false (the sender sets the dedup id = runId)",
        )
    redrive = q.get("RedrivePolicy", {})
    c.check(
        getatt(redrive.get("deadLetterTargetArn")) == ("TurnDlq", "Arn"),
        f"TurnQueue redrives to TurnDlq: {redrive.get('deadLetterTargetArn')}",
    )
    needed = math.ceil(MAX_RUN_SECONDS / runner_timeout)
    receives = default(sam, redrive.get("maxReceiveCount"))
    rust = rust_table_design()["max_receive"]
    c.check(
        isinstance(receives, int) and needed < receives <= 1000,
        f"maxReceiveCount default {receives} leaves room for the {needed} hand-backs of a 48 h run",
    )
    c.check(
        receives == rust, f"maxReceiveCount default {receives} = setup.rs DEFAULT_MAX_RECEIVE_COUNT {rust}"
    )
    low, _ = bounds(sam, q.get("VisibilityTimeout"))
    c.check(
        low >= runner_timeout,
        f"queue visibility timeout can never be below the runner timeout (min {low} < {runner_timeout})",
    )
    vis = default(sam, q.get("VisibilityTimeout"))
    retention = default(sam, q.get("MessageRetentionPeriod", 345600))
    c.check(
        isinstance(vis, int)
        and isinstance(receives, int)
        and isinstance(retention, int)
        and receives * vis <= retention // 4,
        f"maxReceiveCount {receives} x visibility {vis} s stays well inside the retention "
        f"{retention} s (a message reaches the DLQ long before it expires)",
    )
    c.check(
        default(sam, q.get("MessageRetentionPeriod", 345600)) > MAX_RUN_SECONDS,
        "queue retention outlasts a 48 h run",
    )


def workspace_binaries() -> set[str]:
    """The binary names the function crates declare (functions/*/Cargo.toml)."""
    import tomllib

    names = set()
    for manifest in sorted((ROOT / "functions").glob("*/Cargo.toml")):
        crate = tomllib.loads(manifest.read_text())
        names.update(b["name"] for b in crate.get("bin", []))
        names.add(crate.get("package", {}).get("name", ""))
    return names


def functions(cfn: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return of_type(cfn, "AWS::Lambda::Function")


def check_functions(c: Checker, sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    fns = functions(cfn)
    if not c.check(set(fns) == set(BINARIES), f"functions {sorted(BINARIES)}: {sorted(fns)}"):
        return
    archs = set()
    declared = workspace_binaries()
    for name, binary in BINARIES.items():
        c.check(binary in declared, f"{name}: binary {binary} is declared by a crate under functions/")
        props = fns[name]["Properties"]
        c.check(
            props.get("Runtime") == "provided.al2023" and props.get("Handler") == "bootstrap",
            f"{name}: provided.al2023 / bootstrap",
        )
        archs.add(json.dumps(props.get("Architectures")))
        meta = sam["Resources"][name].get("Metadata", {})
        c.check(
            meta.get("BuildMethod") == "rust-cargolambda"
            and meta.get("BuildProperties", {}).get("Binary") == binary,
            f"{name}: built by cargo-lambda as binary {binary}",
        )
        env = props.get("Environment", {}).get("Variables", {})
        c.check(env.get("AGENTLANE_TABLE") == {"Ref": "Table"}, f"{name}: AGENTLANE_TABLE = the table")
        c.check(
            env.get("SSL_CERT_FILE") == AL2023_CA_BUNDLE,
            f"{name}: SSL_CERT_FILE names the provided.al2023 CA bundle: {env.get('SSL_CERT_FILE')}",
        )
        c.check(
            env.get("AGENTLANE_QUEUE_URL") == {"Ref": "TurnQueue"},
            f"{name}: AGENTLANE_QUEUE_URL = the turn queue",
        )
        c.check(
            env.get("AGENTLANE_SECRETS_KMS_KEY") == {"Fn::GetAtt": [TENANT_SECRET_KEY, "Arn"]},
            f"{name}: AGENTLANE_SECRETS_KMS_KEY = the tenant secrets' key: "
            f"{env.get('AGENTLANE_SECRETS_KMS_KEY')}",
        )
        for var, param_name in SECRET_REFERENCE_ENV.items():
            c.check(
                param_name in json.dumps(env.get(var)),
                f"{name}: {var} names the {param_name} parameter: {env.get(var)}",
            )
        for var, value in env.items():
            c.check(
                not is_dynamic_secret(value) and "resolve:secretsmanager" not in json.dumps(value),
                f"{name}: {var} is no secret resolved into a plain variable",
            )
            if var in SECRET_REFERENCE_ENV or var in NOT_SECRET_ENV:
                continue
            c.check(
                not re.search(r"KEY|SECRET|TOKEN|PASSWORD", var),
                f"{name}: no secret-looking variable {var} (keys come from Secrets Manager / SSM)",
            )
    c.check(
        archs == {json.dumps([{"Ref": "Architecture"}])}
        and set(sam["Parameters"]["Architecture"]["AllowedValues"]) == {"x86_64", "arm64"},
        f"one Architecture parameter (x86_64|arm64) for all functions: {archs}",
    )
    ingress, runner, cron = (fns[n]["Properties"] for n in ("IngressFunction", "RunnerFunction", "CronFunction"))
    c.check(
        bounds(sam, ingress["Timeout"])[1] < API_GATEWAY_LIMIT_MS / 1000,
        f"ingress timeout {ingress['Timeout']} below API Gateway's 30 s",
    )
    c.check(
        bounds(sam, runner["Timeout"]) == (RUNNER_TIMEOUT_LIMIT, RUNNER_TIMEOUT_LIMIT),
        f"runner timeout 900 s: {runner['Timeout']}",
    )
    lo, hi = bounds(sam, cron["Timeout"])
    c.check(lo >= 60 and hi <= 300, f"cron timeout within 60-300 s: {lo}-{hi}")


def check_triggers(c: Checker, sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    esms = of_type(cfn, "AWS::Lambda::EventSourceMapping")
    if c.check(len(esms) == 1, f"one event source mapping: {list(esms)}"):
        esm = next(iter(esms.values()))["Properties"]
        c.check(esm.get("FunctionName") == {"Ref": "RunnerFunction"}, "the mapping feeds the runner")
        c.check(getatt(esm.get("EventSourceArn")) == ("TurnQueue", "Arn"), "the mapping reads the turn queue")
        c.check(
            "ReportBatchItemFailures" in esm.get("FunctionResponseTypes", []),
            "the mapping reports batch item failures",
        )
        c.check(esm.get("BatchSize") == 10, f"batch size 10: {esm.get('BatchSize')}")
        c.check("MaximumBatchingWindowInSeconds" not in esm, "no batching window (FIFO queues refuse it)")
        cap = esm.get("ScalingConfig", {}).get("MaximumConcurrency")
        lo, hi = bounds(sam, cap) if cap is not None else (0, 0)
        c.check(
            cap is not None and lo >= 2 and hi <= 1000,
            f"ScalingConfig.MaximumConcurrency set (the global lane), within 2-1000: {cap}",
        )
    apis = of_type(cfn, "AWS::ApiGatewayV2::Api")
    if c.check(len(apis) == 1, f"one HTTP API: {list(apis)}"):
        paths = next(iter(apis.values()))["Properties"].get("Body", {}).get("paths", {})
        route = paths.get("$default", {}).get("x-amazon-apigateway-any-method", {})
        integ = route.get("x-amazon-apigateway-integration", {})
        c.check(list(paths) == ["$default"], f"only the catch-all $default route: {list(paths)}")
        c.check(integ.get("payloadFormatVersion") == "2.0", "payload format 2.0")
        c.check("${IngressFunction.Arn}" in json.dumps(integ.get("uri")), "the route invokes ingress")
        c.check(
            integ.get("timeoutInMillis", API_GATEWAY_LIMIT_MS) <= API_GATEWAY_LIMIT_MS,
            "integration timeout within API Gateway's limit",
        )
    rules = of_type(cfn, "AWS::Events::Rule")
    if c.check(len(rules) == 1, f"one EventBridge rule: {list(rules)}"):
        rule = next(iter(rules.values()))["Properties"]
        c.check(rule.get("ScheduleExpression") == "rate(1 minute)", "cron every minute")
        c.check(
            [getatt(t["Arn"]) for t in rule.get("Targets", [])] == [("CronFunction", "Arn")],
            "the schedule invokes cron",
        )


def check_stream(c: Checker, sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    """The streaming ingress: a Function URL with RESPONSE_STREAM in front of the ingress binary
    in streaming mode, a timeout beyond API Gateway's 30 s and within Lambda's 15 min."""
    urls = of_type(cfn, "AWS::Lambda::Url")
    if c.check(len(urls) == 1, f"one Function URL: {list(urls)}"):
        url = next(iter(urls.values()))["Properties"]
        c.check(
            json.dumps(url.get("TargetFunctionArn")).find("IngressStreamFunction") >= 0,
            f"the Function URL fronts the streaming ingress: {url.get('TargetFunctionArn')}",
        )
        c.check(url.get("InvokeMode") == "RESPONSE_STREAM", f"InvokeMode RESPONSE_STREAM: {url.get('InvokeMode')}")
        c.check(url.get("AuthType") == "NONE", "AuthType NONE (the function checks the API keys)")
    fn = functions(cfn).get("IngressStreamFunction", {}).get("Properties", {})
    env = fn.get("Environment", {}).get("Variables", {})
    c.check(env.get("AGENTLANE_INGRESS_MODE") == "streaming", "the streaming ingress runs in streaming mode")
    lo, hi = bounds(sam, fn.get("Timeout"))
    c.check(
        lo > API_GATEWAY_LIMIT_MS / 1000 and hi <= RUNNER_TIMEOUT_LIMIT,
        f"streaming ingress timeout beyond 30 s, within 900 s: {lo}-{hi}",
    )
    c.check("StreamUrl" in sam.get("Outputs", {}), "output StreamUrl")


def statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    """Every statement, conditional ones (Fn::If [cond, statement, AWS::NoValue]) included."""
    out = []
    for policy in role["Properties"].get("Policies", []):
        for st in as_list(policy["PolicyDocument"]["Statement"]):
            if isinstance(st, dict) and "Fn::If" in st:
                out.extend(b for b in st["Fn::If"][1:] if b != {"Ref": "AWS::NoValue"})
            else:
                out.append(st)
    return out


def check_iam(c: Checker, cfn: dict[str, Any]) -> None:
    c.check(
        not of_type(cfn, "AWS::IAM::Policy") and not of_type(cfn, "AWS::IAM::ManagedPolicy"),
        "no stand-alone IAM policies (all inline, per role)",
    )
    roles = of_type(cfn, "AWS::IAM::Role")
    fns = functions(cfn)
    used = {name: getatt(fn["Properties"].get("Role")) for name, fn in fns.items()}
    c.check(
        sorted(r for r, _ in used.values() if r) == sorted(roles) and len(set(used.values())) == len(fns),
        f"one role per function: {used}",
    )
    for role_name, role in roles.items():
        managed = role["Properties"].get("ManagedPolicyArns")
        c.check(not managed, f"{role_name}: no managed policies (they grant on '*'): {managed}")
        for st in statements(role):
            sid = f"{role_name}/{st.get('Sid', '?')}"
            c.check(
                st.get("Effect") == "Allow" and "NotAction" not in st and "NotResource" not in st,
                f"{sid}: plain Allow statement",
            )
            for action in as_list(st.get("Action", [])):
                c.check("*" not in action, f"{sid}: no wildcard action ({action})")
            for res in as_list(st.get("Resource", [])):
                c.check(
                    res != "*" and not (isinstance(res, str) and re.match(r"^arn:[^$]*:\*", res)),
                    f"{sid}: resource is not '*' ({res})",
                )
    # What each function may do, beyond logs.
    expected_sqs = {
        "IngressRole": {"sqs:SendMessage", "sqs:GetQueueUrl"},
        # the streamed OpenAI-compatible completions accept their turns
        "IngressStreamRole": {"sqs:SendMessage", "sqs:GetQueueUrl"},
        # SendMessage: a turn moved behind an earlier run whose message was never sent
        "RunnerRole": SQS_CONSUMER | {"sqs:GetQueueUrl", "sqs:SendMessage"},
        # the sweep reads the DLQ (turns that reached it end `dead_lettered`)
        "CronRole": {"sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueUrl"},
    }
    # Who may touch the DLQ, and how: only the cron role's sweep, receive + delete.
    dlq_access = {"CronRole": {"sqs:ReceiveMessage", "sqs:DeleteMessage"}}
    for role_name, sqs in expected_sqs.items():
        if not c.check(role_name in roles, f"role {role_name} exists"):
            continue
        actions = {a for st in statements(roles[role_name]) for a in as_list(st["Action"])}
        c.check(
            {a for a in actions if a.startswith("sqs:")} == sqs,
            f"{role_name}: SQS actions exactly {sorted(sqs)}",
        )
        ddb = {a for a in actions if a.startswith("dynamodb:")}
        c.check(ddb and ddb <= DYNAMODB_ITEM_ACTIONS, f"{role_name}: item-level DynamoDB actions only: {ddb}")
        if role_name == "IngressStreamRole":
            check_stream_role(c, role_name, roles[role_name], ddb)
        else:
            check_tenant_writes(c, role_name, roles[role_name])
        c.check(
            {a.split(":")[0] for a in actions} <= {"logs", "sqs", "dynamodb", "secretsmanager", "ssm", "kms"},
            f"{role_name}: nothing beyond logs, sqs, dynamodb and the provider-key reads: {sorted(actions)}",
        )
        key_statements = [
            st for st in statements(roles[role_name])
            if TENANT_SECRET_KEY in json.dumps(st.get("Resource"))
        ]
        check_tenant_secret_key(c, role_name, key_statements)
        provider_statements = [st for st in statements(roles[role_name]) if st not in key_statements]
        secret_reads = {
            a
            for st in provider_statements
            for a in as_list(st["Action"])
            if a.split(":")[0] in {"secretsmanager", "ssm", "kms"}
        }
        c.check(
            secret_reads == set(SECRET_ACTIONS),
            f"{role_name}: provider-key reads exactly {sorted(SECRET_ACTIONS)}: {sorted(secret_reads)}",
        )
        for st in provider_statements:
            for action in as_list(st["Action"]):
                if action in SECRET_ACTIONS:
                    params = [SECRET_ACTIONS[action]]
                    c.check(
                        all(
                            any(p in json.dumps(r) for p in params)
                            for r in as_list(st["Resource"])
                        ),
                        f"{role_name}: {action} only on the {' or '.join(params)} resource",
                    )
                if action == "kms:Decrypt":
                    c.check(
                        "kms:ViaService" in json.dumps(st.get("Condition")),
                        f"{role_name}: kms:Decrypt only through Secrets Manager / SSM",
                    )
        for st in statements(roles[role_name]):
            targets = {getatt(r) for r in as_list(st["Resource"])}
            if ("TurnDlq", "Arn") not in targets:
                continue
            allowed = dlq_access.get(role_name)
            c.check(
                allowed is not None
                and targets == {("TurnDlq", "Arn")}
                and set(as_list(st["Action"])) == allowed,
                f"{role_name}: DLQ access only {sorted(allowed or [])}, in a statement of its own",
            )


# The streaming ingress's writes (infra/iam_inventory.py cannot see that this mode serves only
# `agentlane_api::streaming_app`'s routes, so its role is checked here): each write action in a
# statement of its own, confined by dynamodb:LeadingKeys to exactly these item kinds — the
# tenants' slot items and an accepted turn's session (UpdateItem); a turn's new session, its
# idempotency record, its run and its tenant's registry item (PutItem). Nothing is deleted.
STREAM_ROLE_WRITES = {
    "dynamodb:UpdateItem": ["T#*#SLOTS", "T#*#RATE", "RATE#PROBES#*", "T#*#S#*"],
    "dynamodb:PutItem": ["T#*#S#*", "T#*#K#*", "T#*#R#*", "TENANTS"],
}
STREAM_ROLE_READS = {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem"}


# The table writes of the ingress, runner and cron roles: every write action only in
# statements confined by dynamodb:LeadingKeys to tenant items (`T#{tenant}#...`), so that no
# function can write a `KEY#` lookup item (mint a key for any tenant): only the operator's
# `agentlane keys` does.
# The lists live in iam_inventory.py, which checks the same rule from the code's side.
from iam_inventory import TABLE_WRITES, TENANT_ITEMS, WRITABLE_ITEMS  # noqa: E402


def check_tenant_writes(c: Checker, role_name: str, role: dict[str, Any]) -> None:
    for st in statements(role):
        writes = TABLE_WRITES & set(as_list(st["Action"]))
        if not writes:
            continue
        keys = (st.get("Condition") or {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
        c.check(
            bool(keys) and set(as_list(keys)) <= WRITABLE_ITEMS,
            f"{role_name}/{st.get('Sid', '?')}: {sorted(writes)} only on tenant items "
            f"{TENANT_ITEMS} (and {sorted(WRITABLE_ITEMS - set(TENANT_ITEMS))}) "
            f"(dynamodb:LeadingKeys): {keys}",
        )


def check_tenant_secret_key(c: Checker, role_name: str, key_statements: list[dict[str, Any]]) -> None:
    """A role's grants on the tenant secrets' key: exactly its actions, on that key only, each
    limited to the tenant/secret encryption context (and requiring one)."""
    want = TENANT_SECRET_ACTIONS.get(role_name, set())
    got = {a for st in key_statements for a in as_list(st["Action"])}
    c.check(got == want, f"{role_name}: on the tenant secrets' key exactly {sorted(want)}: {sorted(got)}")
    for st in key_statements:
        c.check(
            [getatt(r) for r in as_list(st["Resource"])] == [(TENANT_SECRET_KEY, "Arn")],
            f"{role_name}/{st.get('Sid', '?')}: only on {TENANT_SECRET_KEY}'s ARN: {st['Resource']}",
        )
        cond = st.get("Condition") or {}
        keys = cond.get("ForAllValues:StringEquals", {}).get("kms:EncryptionContextKeys")
        c.check(
            sorted(as_list(keys or [])) == sorted(TENANT_SECRET_CONTEXT)
            and cond.get("Null", {}).get("kms:EncryptionContextKeys") == "false",
            f"{role_name}/{st.get('Sid', '?')}: encryption context keys exactly "
            f"{TENANT_SECRET_CONTEXT}, and required: {cond}",
        )


def check_tenant_secrets_key(c: Checker, sam: dict[str, Any]) -> None:
    """The tenant secrets' key: symmetric, rotated, aliased as `agentlane setup-aws` names it."""
    res = sam["Resources"]
    key = res.get(TENANT_SECRET_KEY, {})
    props = key.get("Properties", {})
    c.check(key.get("Type") == "AWS::KMS::Key", f"{TENANT_SECRET_KEY} is a KMS key")
    c.check(props.get("EnableKeyRotation") is True, f"{TENANT_SECRET_KEY}: rotation on")
    c.check(
        props.get("KeySpec", "SYMMETRIC_DEFAULT") == "SYMMETRIC_DEFAULT"
        and props.get("KeyUsage", "ENCRYPT_DECRYPT") == "ENCRYPT_DECRYPT",
        f"{TENANT_SECRET_KEY}: a symmetric ENCRYPT_DECRYPT key",
    )
    aliases = [r for r in res.values() if r.get("Type") == "AWS::KMS::Alias"
               and r.get("Properties", {}).get("TargetKeyId") == {"Ref": TENANT_SECRET_KEY}]
    c.check(
        len(aliases) == 1
        and aliases[0]["Properties"].get("AliasName") == {"Fn::Sub": "alias/agentlane-${StageName}-secrets"},
        f"{TENANT_SECRET_KEY}: one alias, alias/<table>-secrets as setup-aws names it",
    )


def check_stream_role(c: Checker, role_name: str, role: dict[str, Any], ddb: set[str]) -> None:
    c.check(
        ddb == STREAM_ROLE_READS | set(STREAM_ROLE_WRITES),
        f"{role_name}: reads, and the writes of slots and accepted turns only: {sorted(ddb)}",
    )
    for st in statements(role):
        actions = as_list(st["Action"])
        for action, leading in STREAM_ROLE_WRITES.items():
            if action not in actions:
                continue
            keys = (st.get("Condition") or {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
            c.check(
                actions == [action] and sorted(as_list(keys or [])) == sorted(leading),
                f"{role_name}: {action} only on the items {leading} (dynamodb:LeadingKeys): {keys}",
            )


def check_logs(c: Checker, sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    groups = of_type(cfn, "AWS::Logs::LogGroup")
    names = {json.dumps(g["Properties"]["LogGroupName"]) for g in groups.values()}
    for name, fn in functions(cfn).items():
        fn_name = fn["Properties"].get("FunctionName", {}).get("Fn::Sub", "")
        c.check(
            json.dumps({"Fn::Sub": "/aws/lambda/" + fn_name}) in names,
            f"{name}: its log group /aws/lambda/{fn_name} is declared",
        )
    for gname, g in groups.items():
        c.check(
            param(sam, g["Properties"].get("RetentionInDays")) is not None,
            f"{gname}: retention set by parameter",
        )


def check_outputs(c: Checker, sam: dict[str, Any]) -> None:
    outputs = set(sam.get("Outputs", {}))
    for out in ("ApiUrl", "TableName", "QueueUrl", "DlqUrl"):
        c.check(out in outputs, f"output {out}")


def check_hook_defaults(c: Checker) -> None:
    """The init hook's default names are setup.rs's, so `agentlane setup-aws` finds them."""
    hook = (ROOT / "localstack/init/ready.d/10-agentlane.sh").read_text()
    rust = rust_table_design()
    defaults = dict(re.findall(r"^(\w+)=\$\{AGENTLANE_\w+:-([^}]+)\}$", hook, re.M))
    c.check(
        defaults.get("TABLE") == rust["table"],
        f"init hook table {defaults.get('TABLE')} = setup.rs {rust['table']}",
    )
    c.check(
        defaults.get("QUEUE") == rust["queue"],
        f"init hook queue {defaults.get('QUEUE')} = setup.rs {rust['queue']}",
    )
    c.check(
        defaults.get("MAX_RECEIVE") == str(rust["max_receive"]),
        f"init hook maxReceiveCount {defaults.get('MAX_RECEIVE')} = setup.rs {rust['max_receive']}",
    )


def check_compose(c: Checker) -> None:
    """localstack/docker-compose.yml: pinned community image, loopback only, the hook mounted."""
    import os

    import yaml

    compose = yaml.safe_load((ROOT / "localstack/docker-compose.yml").read_text())
    svc = compose.get("services", {}).get("localstack", {})
    image = svc.get("image", "")
    c.check(
        re.fullmatch(r"localstack/localstack:\d+\.\d+\.\d+", image) is not None,
        f"compose pins a LocalStack release tag: {image}",
    )
    c.check(
        svc.get("ports") == ["127.0.0.1:4566:4566"], f"compose binds loopback 4566 only: {svc.get('ports')}"
    )
    services = set(str(svc.get("environment", {}).get("SERVICES", "")).split(","))
    c.check(
        {"sqs", "dynamodb", "events"} <= services, f"compose SERVICES has sqs,dynamodb,events: {services}"
    )
    c.check(
        any(str(v).startswith("./init/ready.d:/etc/localstack/init/ready.d") for v in svc.get("volumes", [])),
        f"compose mounts init/ready.d as LocalStack's ready hooks: {svc.get('volumes')}",
    )
    hook = ROOT / "localstack/init/ready.d/10-agentlane.sh"
    c.check(
        os.access(hook, os.X_OK) and hook.read_text().startswith("#!"),
        "the hook is executable with a shebang (LocalStack executes it directly)",
    )


def check_lambda_build(c: Checker) -> None:
    """`sam build` (cargo lambda build --release) builds the functions lean, and only them: the
    workspace's `[workspace.metadata.lambda.build]` puts the `[profile.release-lambda]` settings
    (opt-level "z", fat LTO, one codegen unit, panic = "abort") over the release profile, then no
    PIE and no unwind tables (issue 23.1), while `[profile.release]` stays quick to build and
    unwinding for `serve` (issue 50.3), every key set so that cargo-lambda adds no defaults."""
    import tomllib

    manifest = tomllib.loads((ROOT / "Cargo.toml").read_text())
    config = manifest.get("workspace", {}).get("metadata", {}).get("lambda", {}).get("build", {})
    entries = as_list(config.get("config"))
    settings = " ".join(entries)
    profiles = manifest.get("profile", {})
    lambda_profile = profiles.get("release-lambda", {})
    c.check(
        lambda_profile.get("inherits") == "release",
        f"[profile.release-lambda] inherits release: {lambda_profile.get('inherits')}",
    )
    wanted_profile = {"opt-level": "z", "lto": "fat", "codegen-units": 1, "panic": "abort"}
    for key, value in wanted_profile.items():
        c.check(
            lambda_profile.get(key) == value,
            f"[profile.release-lambda] {key} = {value!r}: {lambda_profile.get(key)!r}",
        )
    # The metadata says the same as the profile, key by key (a --config value is TOML).
    for key, value in lambda_profile.items():
        if key == "inherits":
            continue
        entry = f"profile.release.{key}={json.dumps(value)}"
        c.check(entry in entries, f"cargo lambda build --release adds {entry}: {settings}")
    for wanted in ('"relocation-model=static"', '"force-unwind-tables=no"'):
        c.check(wanted in settings, f"cargo lambda build --release adds {wanted}: {settings}")
    release = profiles.get("release", {})
    c.check(
        release.get("panic") == "unwind",
        f"[profile.release] keeps panic = unwind for serve: {release.get('panic')}",
    )
    c.check(
        release.get("lto") in (False, "off") and release.get("codegen-units", 16) > 1,
        "[profile.release] builds quickly for serve (no LTO across crates, several codegen units): "
        f"lto = {release.get('lto')!r}, codegen-units = {release.get('codegen-units')!r}",
    )
    # cargo-lambda adds thin LTO, one codegen unit, abort and stripping to a release profile that
    # leaves them unset; set, it adds none, and the metadata's settings are the only ones.
    for key in ("lto", "codegen-units", "panic", "strip"):
        c.check(key in release, f"[profile.release] sets {key} (cargo-lambda adds no default)")


def check_samconfig(c: Checker, sam: dict[str, Any]) -> None:
    """infra/samconfig.toml names only parameters the template has, and every required one."""
    import tomllib

    config = tomllib.loads((ROOT / "infra/samconfig.toml").read_text())["default"]
    overrides = config.get("global", {}).get("parameters", {}).get("parameter_overrides", [])
    names = {o.split("=", 1)[0] for o in as_list(overrides)}
    params = sam.get("Parameters", {})
    c.check(names <= set(params), f"samconfig overrides only known parameters: {sorted(names - set(params))}")
    required = {n for n, p in params.items() if "Default" not in p}
    c.check(required <= names, f"samconfig sets every parameter without default: {sorted(required - names)}")
    c.check(
        config.get("build", {}).get("parameters", {}).get("beta_features") is True,
        "samconfig enables beta features for `sam build` (rust-cargolambda)",
    )
    c.check(
        "CAPABILITY_IAM" in str(config.get("deploy", {}).get("parameters", {}).get("capabilities")),
        "samconfig deploys with CAPABILITY_IAM (the template creates roles)",
    )


def check_operations(c: Checker, sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    """Alarms (DLQ not empty, runner errors, stuck sessions, dead letters, poisoned runs), API
    throttling and access logs,
    the EMF namespace the alarms read, the concurrency knobs."""
    alarms = list(of_type(cfn, "AWS::CloudWatch::Alarm").values())

    def alarm(namespace: Any, metric: str) -> dict[str, Any] | None:
        for a in alarms:
            p = a["Properties"]
            if p.get("Namespace") == namespace and p.get("MetricName") == metric:
                return p
        return None

    dlq = alarm("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    if c.check(dlq is not None, "an alarm on the DLQ's visible messages"):
        dims = {d["Name"]: d["Value"] for d in dlq.get("Dimensions", [])}
        c.check(getatt(dims.get("QueueName")) == ("TurnDlq", "QueueName"), f"it watches TurnDlq: {dims}")
        c.check(
            dlq.get("Threshold") == 0 and dlq.get("ComparisonOperator") == "GreaterThanThreshold",
            "it fires on one message (> 0)",
        )
    errors = alarm("AWS/Lambda", "Errors")
    if c.check(errors is not None, "an alarm on Lambda errors"):
        dims = {d["Name"]: d["Value"] for d in errors.get("Dimensions", [])}
        c.check(dims.get("FunctionName") == {"Ref": "RunnerFunction"}, f"it watches the runner: {dims}")
    namespace = sam["Globals"]["Function"]["Environment"]["Variables"].get("AGENTLANE_METRICS_NAMESPACE")
    c.check(namespace is not None, "the functions get AGENTLANE_METRICS_NAMESPACE (EMF)")
    stuck = alarm(namespace, "stuck_sessions")
    c.check(stuck is not None, f"an alarm on stuck_sessions in the functions' namespace {namespace}")
    # The sweep deletes dead letters within a minute, so the DLQ's own metric can miss them:
    # the sweep's count, and the runner's poisoned runs, each raise an alarm on the first one.
    for metric in ("dead_lettered", "poisoned_runs"):
        a = alarm(namespace, metric)
        if c.check(a is not None, f"an alarm on {metric} in the functions' namespace {namespace}"):
            c.check(
                a.get("Statistic") == "Sum"
                and a.get("Threshold") == 0
                and a.get("ComparisonOperator") == "GreaterThanThreshold"
                and a.get("TreatMissingData") == "notBreaching",
                f"the {metric} alarm fires on one (Sum > 0), quiet without data: {a}",
            )
    api = sam["Resources"]["HttpApi"]["Properties"]
    route = api.get("DefaultRouteSettings", {})
    c.check(
        "ThrottlingRateLimit" in route and "ThrottlingBurstLimit" in route,
        f"the HTTP API throttles its default route: {route}",
    )
    logs = api.get("AccessLogSettings", {})
    dest = getatt(logs.get("DestinationArn"))
    c.check(
        dest is not None and sam["Resources"].get(dest[0], {}).get("Type") == "AWS::Logs::LogGroup",
        f"the HTTP API writes access logs to a log group of the stack: {logs.get('DestinationArn')}",
    )
    fmt = str(logs.get("Format", ""))
    c.check("$context.requestId" in fmt and "$context.status" in fmt, "access log lines carry request id and status")
    runner = sam["Resources"]["RunnerFunction"]["Properties"]
    c.check(
        "ReservedConcurrentExecutions" in runner,
        "the runner's reserved concurrency is a parameter (its share of the account)",
    )
    check_concurrency(c, sam)
    check_waf(c, sam)


def reserved_default(sam: dict[str, Any], function: str) -> Any:
    """The default reserved concurrency of `function`: the default of the parameter its
    `ReservedConcurrentExecutions` names (directly or in an `!If` whose other branch is
    AWS::NoValue), or None when it has none."""
    value = sam["Resources"][function]["Properties"].get("ReservedConcurrentExecutions")
    if isinstance(value, dict) and "Fn::If" in value:
        _, then, _ = value["Fn::If"]
        value = then
    p = param(sam, value)
    return None if p is None else p.get("Default")


def check_concurrency(c: Checker, sam: dict[str, Any]) -> None:
    """The streaming ingress (a Function URL, no throttle of its own) is bounded by a reserved
    concurrency set by default, and the runner keeps a reserved share by default, at least its
    event source's MaximumConcurrency: open streams and waits cannot take the runner's share."""
    stream = reserved_default(sam, "IngressStreamFunction")
    c.check(
        isinstance(stream, int) and stream > 0,
        f"the streaming ingress has a reserved concurrency by default (its bound): {stream}",
    )
    runner = reserved_default(sam, "RunnerFunction")
    lane = sam["Parameters"].get("RunnerMaxConcurrency", {}).get("Default")
    c.check(
        isinstance(runner, int) and isinstance(lane, int) and runner >= lane > 0,
        f"the runner reserves concurrency by default, at least RunnerMaxConcurrency: {runner} >= {lane}",
    )


def check_waf(c: Checker, sam: dict[str, Any]) -> None:
    """An opt-in WAF (off by default): a web ACL with a rate rule per source IP that blocks, on
    a CloudFront distribution whose origin is the HTTP API."""
    rate = sam["Parameters"].get("WafRatePerIp")
    if not c.check(rate is not None and rate.get("Default") == 0, f"WafRatePerIp is opt-in (default 0): {rate}"):
        return
    acls = of_type(sam, "AWS::WAFv2::WebACL")
    rules = [
        r
        for acl in acls.values()
        for r in acl["Properties"].get("Rules", [])
        if r.get("Statement", {}).get("RateBasedStatement", {}).get("AggregateKeyType") == "IP"
        and r["Statement"]["RateBasedStatement"].get("Limit") == {"Ref": "WafRatePerIp"}
        and "Block" in r.get("Action", {})
    ]
    c.check(len(acls) == 1 and len(rules) == 1, f"one web ACL blocking per IP beyond WafRatePerIp: {list(acls)}")
    c.check(
        all(acl.get("Condition") == "HasWaf" for acl in acls.values()),
        "the web ACL exists only when WafRatePerIp > 0",
    )
    dists = of_type(sam, "AWS::CloudFront::Distribution").values()
    fronted = [
        d
        for d in dists
        if getatt(d["Properties"]["DistributionConfig"].get("WebACLId")) == (next(iter(acls), ""), "Arn")
        and "HttpApi" in json.dumps(d["Properties"]["DistributionConfig"].get("Origins"))
    ]
    c.check(len(fronted) == 1, "a CloudFront distribution with the web ACL fronts the HTTP API")


def structure(src: str, translated: str) -> int:
    sam = load_sam(src)
    cfn = json.loads(Path(translated).read_text())
    c = Checker()
    runner_timeout = float(sam["Resources"]["RunnerFunction"]["Properties"]["Timeout"])
    check_storage(c, sam)
    check_tenant_secrets_key(c, sam)
    check_queues(c, sam, runner_timeout)
    check_functions(c, sam, cfn)
    check_triggers(c, sam, cfn)
    check_stream(c, sam, cfn)
    check_iam(c, cfn)
    check_logs(c, sam, cfn)
    check_operations(c, sam, cfn)
    check_outputs(c, sam)
    check_hook_defaults(c)
    check_compose(c)
    check_samconfig(c, sam)
    check_lambda_build(c)
    print(f"structure: {c.count - len(c.failures)} of {c.count} assertions hold")
    return 1 if c.failures else 0


# ----------------------------------------------------------------------------- emulator


def emulator(src: str, endpoint: str, table: str, queue: str, dlq: str) -> int:
    """The table and queues the init hook created on `endpoint` match the template."""
    import boto3

    kw = {
        "endpoint_url": endpoint,
        "region_name": "us-east-1",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
    }
    ddb, sqs = boto3.client("dynamodb", **kw), boto3.client("sqs", **kw)
    sam = load_sam(src)
    want = template_table_design(sam["Resources"]["Table"])
    c = Checker()
    desc = ddb.describe_table(TableName=table)["Table"]
    got = {
        "attributes": {a["AttributeName"]: a["AttributeType"] for a in desc["AttributeDefinitions"]},
        "keys": [(k["AttributeName"], k["KeyType"]) for k in desc["KeySchema"]],
        "indexes": {
            g["IndexName"]: tuple(k["AttributeName"] for k in g["KeySchema"])
            for g in desc.get("GlobalSecondaryIndexes", [])
        },
        "projections": {
            g["IndexName"]: g["Projection"]["ProjectionType"] for g in desc.get("GlobalSecondaryIndexes", [])
        },
    }
    ttl = ddb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    got["ttl"] = ttl.get("AttributeName") if ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING") else None
    for key in ("attributes", "keys", "indexes", "projections", "ttl"):
        c.check(got[key] == want[key], f"table {key}: emulator {got[key]} template {want[key]}")
    c.check(desc.get("BillingModeSummary", {}).get("BillingMode") == "PAY_PER_REQUEST", "table on-demand")

    tq = sam["Resources"]["TurnQueue"]["Properties"]
    q_url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    d_url = sqs.get_queue_url(QueueName=dlq)["QueueUrl"]
    qa = sqs.get_queue_attributes(QueueUrl=q_url, AttributeNames=["All"])["Attributes"]
    da = sqs.get_queue_attributes(QueueUrl=d_url, AttributeNames=["All"])["Attributes"]
    for name, attrs in ((queue, qa), (dlq, da)):
        c.check(attrs.get("FifoQueue") == "true", f"{name} is FIFO")
        c.check(attrs.get("ContentBasedDeduplication") == "false", f"{name}: explicit dedup ids")
    redrive = json.loads(qa.get("RedrivePolicy", "{}"))
    c.check(redrive.get("deadLetterTargetArn") == da.get("QueueArn"), f"{queue} redrives to {dlq}")
    c.check(
        int(redrive.get("maxReceiveCount", 0)) == default(sam, tq["RedrivePolicy"]["maxReceiveCount"]),
        f"maxReceiveCount {redrive.get('maxReceiveCount')} = template default",
    )
    for attr in ("DeduplicationScope", "FifoThroughputLimit", "MessageRetentionPeriod"):
        c.check(
            str(qa.get(attr)) == str(default(sam, tq[attr])),
            f"{queue} {attr}: emulator {qa.get(attr)} template {default(sam, tq[attr])}",
        )
    print(f"emulator: {c.count - len(c.failures)} of {c.count} assertions hold")
    return 1 if c.failures else 0


# ----------------------------------------------------------------------------- self-test

# Each mutation breaks one fact; `structure` must then fail. (old text, new text) in the template.
MUTATIONS = {
    "no ReportBatchItemFailures": ("FunctionResponseTypes: [ReportBatchItemFailures]", ""),
    "no MaximumConcurrency": (
        "ScalingConfig:\n              MaximumConcurrency: !Ref RunnerMaxConcurrency",
        "",
    ),
    "standard queue": (
        "QueueName: !Sub agentlane-${StageName}-turns.fifo\n      FifoQueue: true",
        "QueueName: !Sub agentlane-${StageName}-turns.fifo\n      FifoQueue: false",
    ),
    "no redrive": (
        "      RedrivePolicy:\n        deadLetterTargetArn: !GetAtt TurnDlq.Arn\n"
        "        maxReceiveCount: !Ref MaxReceiveCount\n",
        "",
    ),
    "too few receives": ("    Default: 250\n", "    Default: 100\n"),
    "Resource *": ("Resource: !GetAtt TurnQueue.Arn", "Resource: '*'"),
    "wildcard action": ("- dynamodb:Query", "- dynamodb:*"),
    "renamed GSI": ("IndexName: cronDue", "IndexName: cron_due"),
    "streaming ingress may delete": (
        "                  - dynamodb:BatchGetItem\n                Resource: !GetAtt Table.Arn\n"
        "              # The per-tenant stream/wait caps",
        "                  - dynamodb:BatchGetItem\n                  - dynamodb:DeleteItem\n"
        "                Resource: !GetAtt Table.Arn\n              # The per-tenant stream/wait caps",
    ),
    "streaming ingress puts any item": (
        'dynamodb:LeadingKeys: ["T#*#S#*", "T#*#K#*", "T#*#R#*", "TENANTS"]',
        'dynamodb:LeadingKeys: ["T#*"]',
    ),
    "plain-text key": (
        "        AGENTLANE_LOG: !Ref LogLevel\n",
        "        AGENTLANE_LOG: !Ref LogLevel\n        OPENAI_API_KEY: sk-0123456789abcdef0123\n",
    ),
    "resolved secret": (
        "          AGENTLANE_API_KEY_CACHE_TTL_MS: !Ref ApiKeyCacheTtlMs\n",
        "          AGENTLANE_API_KEY_CACHE_TTL_MS: !Ref ApiKeyCacheTtlMs\n"
        '          AGENTLANE_API_KEYS: "{{resolve:secretsmanager:agentlane/dev/api-keys:SecretString}}"\n',
    ),
    "secret read on any secret": (
        "Action: secretsmanager:GetSecretValue\n                  Resource: !Ref ProviderKeysSecretArn",
        "Action: secretsmanager:GetSecretValue\n                  Resource: !Sub arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:*",
    ),
    "managed policy": (
        "      Description: agentlane cron (scheduled) function\n",
        "      Description: agentlane cron (scheduled) function\n      ManagedPolicyArns:\n"
        "        - arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole\n",
    ),
    "short visibility": ("    MinValue: 900\n", "    MinValue: 30\n"),
    "no DLQ alarm": ("      MetricName: ApproximateNumberOfMessagesVisible\n", "      MetricName: NumberOfMessagesSent\n"),
    "no API throttling": ("        ThrottlingRateLimit: !Ref ApiThrottlingRateLimit\n", ""),
    "no dead-letter alarm": ("      MetricName: dead_lettered\n", "      MetricName: dead_letters\n"),
    "no poisoned-runs alarm": ("      MetricName: poisoned_runs\n", "      MetricName: poison\n"),
    "runner writes any item": (
        "                  # queue mode steer: a taken steer's pending item (PS#<seq>) is deleted\n"
        "                  - dynamodb:DeleteItem\n"
        "                  - dynamodb:ConditionCheckItem\n"
        "                Resource: !GetAtt Table.Arn\n"
        "                Condition:\n"
        "                  ForAllValues:StringLike:\n"
        '                    dynamodb:LeadingKeys: ["T#*"]\n',
        "                  # queue mode steer: a taken steer's pending item (PS#<seq>) is deleted\n"
        "                  - dynamodb:DeleteItem\n"
        "                  - dynamodb:ConditionCheckItem\n"
        "                Resource: !GetAtt Table.Arn\n",
    ),
    "tenant secrets key without rotation": (
        "      EnableKeyRotation: true\n", "      EnableKeyRotation: false\n"
    ),
    "runner decrypts tenant secrets under any context": (
        "                Action: kms:Decrypt\n"
        "                Resource: !GetAtt SecretsKey.Arn\n"
        "                Condition:\n"
        "                  ForAllValues:StringEquals:\n"
        "                    kms:EncryptionContextKeys: [tenant, secret]\n",
        "                Action: kms:Decrypt\n"
        "                Resource: !GetAtt SecretsKey.Arn\n"
        "                Condition:\n"
        "                  ForAllValues:StringLike:\n"
        "                    kms:EncryptionContextKeys: [tenant, secret]\n",
    ),
    "ingress may decrypt tenant secrets": (
        "                Action: kms:GenerateDataKey\n",
        "                Action: [kms:GenerateDataKey, kms:Decrypt]\n",
    ),
    "cron writes key items": (
        "                  # the retention sweep: an expired session's runs, events and transcript\n"
        "                  - dynamodb:BatchWriteItem\n"
        "                Resource: !GetAtt Table.Arn\n"
        "                Condition:\n"
        "                  ForAllValues:StringLike:\n"
        '                    dynamodb:LeadingKeys: ["T#*", "TENANTS"]\n',
        "                  # the retention sweep: an expired session's runs, events and transcript\n"
        "                  - dynamodb:BatchWriteItem\n"
        "                Resource: !GetAtt Table.Arn\n"
        "                Condition:\n"
        "                  ForAllValues:StringLike:\n"
        '                    dynamodb:LeadingKeys: ["T#*", "TENANTS", "KEY#*"]\n',
    ),
    "ingress writes in the read statement": (
        "                  # accept_turn reads the session and the idempotency record in one call\n"
        "                  - dynamodb:BatchGetItem\n",
        "                  # accept_turn reads the session and the idempotency record in one call\n"
        "                  - dynamodb:BatchGetItem\n                  - dynamodb:PutItem\n",
    ),
    "unbounded streaming ingress": (
        "      ReservedConcurrentExecutions: !If [ReserveIngressStream, !Ref IngressStreamReservedConcurrency, !Ref AWS::NoValue]\n",
        "",
    ),
    "runner unreserved by default": (
        "  RunnerReservedConcurrency:\n    Type: Number\n    Default: 10\n",
        "  RunnerReservedConcurrency:\n    Type: Number\n    Default: 0\n",
    ),
    "WAF on by default": (
        "  WafRatePerIp:\n    Type: Number\n    Default: 0\n",
        "  WafRatePerIp:\n    Type: Number\n    Default: 1000\n",
    ),
    "WAF rule counts only": ("          Action:\n            Block: {}\n", "          Action:\n            Count: {}\n"),
    "stuck alarm in another namespace": (
        "      Namespace: !Sub agentlane/${StageName}\n      MetricName: stuck_sessions",
        "      Namespace: agentlane\n      MetricName: stuck_sessions",
    ),
}


def selftest(src: str, workdir: str) -> int:
    import contextlib
    import io

    text = Path(src).read_text()
    bad = 0
    for name, (old, new) in MUTATIONS.items():
        if text.count(old) < 1:
            print(f"  FAIL mutation '{name}' no longer applies to the template (update MUTATIONS)")
            bad += 1
            continue
        mutated = Path(workdir, "mutated.yaml")
        mutated.write_text(text.replace(old, new, 1))
        out = Path(workdir, "mutated.json")
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                translate(str(mutated), str(out))
                rc = structure(str(mutated), str(out))
            except Exception as err:  # a mutation that breaks translation is also caught
                rc = f"translation failed: {err}"
        if rc == 0:
            print(f"  FAIL structure checks accept a template with: {name}")
            bad += 1
    print(f"self-test: {len(MUTATIONS) - bad} of {len(MUTATIONS)} broken templates rejected")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "translate":
        translate(argv[1], argv[2])
        return 0
    if len(argv) == 3 and argv[0] == "structure":
        return structure(argv[1], argv[2])
    if len(argv) == 3 and argv[0] == "selftest":
        return selftest(argv[1], argv[2])
    if len(argv) == 6 and argv[0] == "emulator":
        return emulator(*argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

//! The KMS key tenant secrets' data keys are made under (see [`crate::kms`]): a symmetric key
//! with yearly rotation and an alias, created when absent (idempotent).

use super::{AwsConfig, SetupError, aws_error};
use aws_config::SdkConfig;
use aws_sdk_kms::error::ProvideErrorMetadata;
use aws_sdk_kms::types::{KeySpec, KeyState, KeyUsageType};

/// The KMS key of tenant secrets, as set-up found or made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretsKey {
    /// What `AGENTLANE_SECRETS_KMS_KEY` is set to: the alias set-up made (`alias/<table>-secrets`),
    /// or the key configured.
    pub key: String,
    /// The key's ARN (what IAM grants name).
    pub arn: String,
}

/// The alias set-up gives the secrets key of `table`: `alias/<table>-secrets` (an alias takes
/// `[A-Za-z0-9/_-]`, so a `.` of the table name becomes `-`).
pub fn secrets_key_alias(table: &str) -> String {
    let stem: String = table
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("alias/{stem}-secrets")
}

/// The KMS key of tenant secrets: the configured one ([`AwsConfig::secrets_kms_key`]),
/// checked, or the table's alias ([`secrets_key_alias`]) and its key, created when absent
/// (symmetric, yearly rotation on). Idempotent; two set-ups racing end on one key.
pub async fn ensure_secrets_key(
    sdk: &SdkConfig,
    config: &AwsConfig,
) -> Result<SecretsKey, SetupError> {
    let kms = aws_sdk_kms::Client::new(sdk);
    if let Some(key) = &config.secrets_kms_key {
        let Some(arn) = usable_key(&kms, key).await? else {
            return Err(SetupError::InvalidConfig(format!(
                "AGENTLANE_SECRETS_KMS_KEY={key:?}: no such KMS key"
            )));
        };
        return Ok(SecretsKey {
            key: key.clone(),
            arn,
        });
    }
    let alias = secrets_key_alias(&config.table);
    if let Some(arn) = usable_key(&kms, &alias).await? {
        return Ok(SecretsKey { key: alias, arn });
    }
    let created = kms
        .create_key()
        .key_spec(KeySpec::SymmetricDefault)
        .key_usage(KeyUsageType::EncryptDecrypt)
        .description(format!(
            "agentlane tenant secrets (table {}): wraps each secret's data key",
            config.table
        ))
        .send()
        .await
        .map_err(aws_error("CreateKey"))?;
    let metadata = created.key_metadata.ok_or_else(|| SetupError::Aws {
        operation: "CreateKey",
        message: "the answer had no key metadata".into(),
    })?;
    let key_id = metadata.key_id.clone();
    kms.enable_key_rotation()
        .key_id(&key_id)
        .send()
        .await
        .map_err(aws_error("EnableKeyRotation"))?;
    let aliased = kms
        .create_alias()
        .alias_name(&alias)
        .target_key_id(&key_id)
        .send()
        .await;
    match aliased {
        Ok(_) => {
            tracing::info!(alias = %alias, "created the KMS key of tenant secrets");
            Ok(SecretsKey {
                key: alias,
                arn: metadata.arn.unwrap_or(key_id),
            })
        }
        // Another set-up made the alias meanwhile: use its key, retire ours (unused).
        Err(err)
            if err.as_service_error().and_then(|e| e.code()) == Some("AlreadyExistsException") =>
        {
            let _ = kms
                .schedule_key_deletion()
                .key_id(&key_id)
                .pending_window_in_days(7)
                .send()
                .await;
            let arn = usable_key(&kms, &alias)
                .await?
                .ok_or_else(|| SetupError::Aws {
                    operation: "DescribeKey",
                    message: format!("{alias} exists but names no usable key"),
                })?;
            Ok(SecretsKey { key: alias, arn })
        }
        Err(err) => Err(aws_error("CreateAlias")(err)),
    }
}

/// The ARN of `key` (id, ARN or alias) when it exists; an error when it exists but cannot
/// wrap data keys (not symmetric, not enabled).
async fn usable_key(kms: &aws_sdk_kms::Client, key: &str) -> Result<Option<String>, SetupError> {
    let out = match kms.describe_key().key_id(key).send().await {
        Ok(out) => out,
        Err(err) if err.as_service_error().and_then(|e| e.code()) == Some("NotFoundException") => {
            return Ok(None);
        }
        Err(err) => return Err(aws_error("DescribeKey")(err)),
    };
    let Some(metadata) = out.key_metadata else {
        return Ok(None);
    };
    let symmetric = metadata
        .key_usage
        .as_ref()
        .is_none_or(|u| *u == KeyUsageType::EncryptDecrypt)
        && metadata
            .key_spec
            .as_ref()
            .is_none_or(|s| *s == KeySpec::SymmetricDefault);
    if !symmetric {
        return Err(SetupError::InvalidConfig(format!(
            "KMS key {key} is not a symmetric ENCRYPT_DECRYPT key"
        )));
    }
    match metadata.key_state {
        None | Some(KeyState::Enabled) => Ok(Some(metadata.arn.unwrap_or(metadata.key_id))),
        Some(state) => Err(SetupError::InvalidConfig(format!(
            "KMS key {key} is {}, not Enabled",
            state.as_str()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alias_follows_the_table_in_the_characters_an_alias_takes() {
        assert_eq!(secrets_key_alias("agentlane"), "alias/agentlane-secrets");
        assert_eq!(
            secrets_key_alias("prod.agents_1"),
            "alias/prod-agents_1-secrets"
        );
    }
}

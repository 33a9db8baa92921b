//! Provider keys from AWS secret stores, read once at start-up: a Secrets Manager secret
//! (a JSON object) or the SecureString parameters under an SSM Parameter Store path. Values
//! are returned to the caller and never logged.

use aws_config::SdkConfig;

/// Failures reading a secret. Messages name the secret or path, never a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The service call failed (missing secret, no permission, network).
    #[error("reading {what}: {detail}")]
    Read {
        /// The secret id or parameter path.
        what: String,
        /// The service's error (no secret material).
        detail: String,
    },
    /// The secret has no string value (a binary secret).
    #[error("the secret {0} has no string value")]
    NotString(String),
}

/// The string value of the Secrets Manager secret `secret_id` (an ARN or a name).
pub async fn secret_string(sdk: &SdkConfig, secret_id: &str) -> Result<String, SecretError> {
    let client = aws_sdk_secretsmanager::Client::new(sdk);
    let out = client
        .get_secret_value()
        .secret_id(secret_id)
        .send()
        .await
        .map_err(|e| SecretError::Read {
            what: secret_id.to_owned(),
            detail: aws_sdk_secretsmanager::error::DisplayErrorContext(e).to_string(),
        })?;
    out.secret_string
        .ok_or_else(|| SecretError::NotString(secret_id.to_owned()))
}

/// The parameters directly under `path` (e.g. `/agentlane/provider-keys/`), decrypted, as
/// (last name segment, value) pairs: `/agentlane/provider-keys/openai` gives `openai`.
pub async fn parameters_under(
    sdk: &SdkConfig,
    path: &str,
) -> Result<Vec<(String, String)>, SecretError> {
    let client = aws_sdk_ssm::Client::new(sdk);
    let mut pairs = Vec::new();
    let mut next = None;
    loop {
        let out = client
            .get_parameters_by_path()
            .path(path)
            .with_decryption(true)
            .recursive(false)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| SecretError::Read {
                what: path.to_owned(),
                detail: aws_sdk_ssm::error::DisplayErrorContext(e).to_string(),
            })?;
        for parameter in out.parameters.unwrap_or_default() {
            if let (Some(name), Some(value)) = (parameter.name, parameter.value) {
                let short = name.rsplit('/').next().unwrap_or(&name).to_owned();
                pairs.push((short, value));
            }
        }
        match out.next_token {
            Some(token) if !token.is_empty() => next = Some(token),
            _ => return Ok(pairs),
        }
    }
}

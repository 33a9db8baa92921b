//! Configuration and resource set-up: the SDK configuration (with zero-config emulator
//! defaults), and the table and FIFO queues the adapters need, created when absent.

mod resources;
mod secrets_key;

pub use resources::{Resources, ensure_resources, ensure_table, resolve_queue_url};
pub use secrets_key::{SecretsKey, ensure_secrets_key, secrets_key_alias};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};

/// Default table name.
pub const DEFAULT_TABLE: &str = "agentlane";
/// Default FIFO queue name.
pub const DEFAULT_QUEUE_NAME: &str = "agentlane-turns.fifo";
/// Default receives before a message moves to the dead-letter queue. It must exceed the
/// hand-backs a 48 h run needs (one per 15-minute Lambda invocation: 192).
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 250;
/// Default queue visibility timeout (seconds).
pub const DEFAULT_VISIBILITY_TIMEOUT_SECS: u32 = 60;

/// Static credentials used against an emulator when none are configured.
pub const EMULATOR_ACCESS_KEY: &str = "test";
/// Region used against an emulator when none is configured.
pub const EMULATOR_REGION: &str = "us-east-1";

/// Set-up and configuration failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// A configuration value is unusable.
    #[error("invalid AWS configuration: {0}")]
    InvalidConfig(String),
    /// An AWS call failed.
    #[error("{operation} failed: {message}")]
    Aws {
        /// The API operation, e.g. `CreateTable`.
        operation: &'static str,
        /// The error with its causes.
        message: String,
    },
    /// A resource did not become ready in time.
    #[error("timed out: {0}")]
    Timeout(String),
}

pub(crate) fn aws_error<E, R>(operation: &'static str) -> impl FnOnce(SdkError<E, R>) -> SetupError
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    move |err| SetupError::Aws {
        operation,
        message: DisplayErrorContext(&err).to_string(),
    }
}

/// The most message groups one tenant may be given (`AGENTLANE_TENANT_LANES`).
pub const MAX_TENANT_LANES: u32 = 10_000;

/// Names and settings of the AWS resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsConfig {
    /// The DynamoDB table (`AGENTLANE_TABLE`, default `agentlane`).
    pub table: String,
    /// The FIFO queue's name (`AGENTLANE_QUEUE_NAME`, default `agentlane-turns.fifo`).
    pub queue_name: String,
    /// A queue managed elsewhere (`AGENTLANE_QUEUE_URL`): used as is, no queue is created.
    pub queue_url: Option<String>,
    /// The FIFO dead-letter queue's name (`AGENTLANE_DLQ_NAME`, default: the queue name with
    /// `-dlq` before `.fifo`).
    pub dlq_name: String,
    /// Receives before a message moves to the DLQ (`AGENTLANE_MAX_RECEIVE_COUNT`, 1–1000).
    pub max_receive_count: u32,
    /// The queue's default visibility timeout in seconds (`AGENTLANE_VISIBILITY_TIMEOUT`).
    pub visibility_timeout_secs: u32,
    /// Message groups per tenant (`AGENTLANE_TENANT_LANES`, 0–10000; default 0: one group per
    /// session). N caps a tenant at N turns in flight: see [`crate::queue::tenant_lane_group_id`].
    pub tenant_lanes: u32,
    /// A KMS key for tenant secrets managed elsewhere (`AGENTLANE_SECRETS_KMS_KEY`: key id, ARN
    /// or alias): checked and used as is. `None`: set-up makes `alias/<table>-secrets`.
    pub secrets_kms_key: Option<String>,
}

impl Default for AwsConfig {
    fn default() -> Self {
        Self {
            table: DEFAULT_TABLE.to_owned(),
            queue_name: DEFAULT_QUEUE_NAME.to_owned(),
            queue_url: None,
            dlq_name: dlq_name_for(DEFAULT_QUEUE_NAME),
            max_receive_count: DEFAULT_MAX_RECEIVE_COUNT,
            visibility_timeout_secs: DEFAULT_VISIBILITY_TIMEOUT_SECS,
            tenant_lanes: 0,
            secrets_kms_key: None,
        }
    }
}

/// `name.fifo` → `name-dlq.fifo`.
pub fn dlq_name_for(queue_name: &str) -> String {
    let stem = queue_name.strip_suffix(".fifo").unwrap_or(queue_name);
    format!("{stem}-dlq.fifo")
}

impl AwsConfig {
    /// From the process environment (see the field docs for the variables).
    pub fn from_env() -> Result<Self, SetupError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From any variable source; empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SetupError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let number = |name: &str, default: u32| -> Result<u32, SetupError> {
            match get(name) {
                None => Ok(default),
                Some(v) => v.trim().parse().map_err(|_| {
                    SetupError::InvalidConfig(format!("{name}={v:?} is not a whole number"))
                }),
            }
        };
        let queue_name = get("AGENTLANE_QUEUE_NAME").unwrap_or_else(|| DEFAULT_QUEUE_NAME.into());
        let config = Self {
            table: get("AGENTLANE_TABLE").unwrap_or_else(|| DEFAULT_TABLE.into()),
            dlq_name: get("AGENTLANE_DLQ_NAME").unwrap_or_else(|| dlq_name_for(&queue_name)),
            queue_name,
            queue_url: get("AGENTLANE_QUEUE_URL"),
            max_receive_count: number("AGENTLANE_MAX_RECEIVE_COUNT", DEFAULT_MAX_RECEIVE_COUNT)?,
            visibility_timeout_secs: number(
                "AGENTLANE_VISIBILITY_TIMEOUT",
                DEFAULT_VISIBILITY_TIMEOUT_SECS,
            )?,
            tenant_lanes: number("AGENTLANE_TENANT_LANES", 0)?,
            secrets_kms_key: get(crate::kms::KMS_KEY_ENV).map(|v| v.trim().to_owned()),
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks names and numbers against AWS's rules.
    pub fn validate(&self) -> Result<(), SetupError> {
        let invalid = |msg: String| Err(SetupError::InvalidConfig(msg));
        let table_ok = (3..=255).contains(&self.table.len())
            && self
                .table
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !table_ok {
            return invalid(format!(
                "table name {:?} must be 3-255 characters of [A-Za-z0-9_.-]",
                self.table
            ));
        }
        for name in [&self.queue_name, &self.dlq_name] {
            let stem = name.strip_suffix(".fifo").unwrap_or_default();
            let ok = !stem.is_empty()
                && name.len() <= 80
                && stem
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
            if !ok {
                return invalid(format!(
                    "queue name {name:?} must be a FIFO queue name: up to 80 characters of \
                     [A-Za-z0-9_-] ending in .fifo"
                ));
            }
        }
        if self.queue_name == self.dlq_name {
            return invalid("the queue and its dead-letter queue need different names".into());
        }
        if !(1..=1000).contains(&self.max_receive_count) {
            return invalid(format!(
                "max_receive_count {} must be 1-1000",
                self.max_receive_count
            ));
        }
        if self.tenant_lanes > MAX_TENANT_LANES {
            return invalid(format!(
                "tenant lanes {} must be 0-{MAX_TENANT_LANES}",
                self.tenant_lanes
            ));
        }
        if self.visibility_timeout_secs > 43_200 {
            return invalid(format!(
                "visibility timeout {} s exceeds SQS's 43200 s",
                self.visibility_timeout_secs
            ));
        }
        Ok(())
    }
}

/// What to add to the standard configuration chain when pointing at an emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EmulatorFallbacks {
    static_credentials: bool,
    default_region: bool,
}

/// With `AWS_ENDPOINT_URL` set and nothing else configured, an emulator is meant: use static
/// test credentials and `us-east-1` rather than probing instance metadata. `profile_files` says
/// whether `~/.aws/config` or `~/.aws/credentials` exist.
fn emulator_fallbacks(
    lookup: &dyn Fn(&str) -> Option<String>,
    profile_files: bool,
) -> EmulatorFallbacks {
    let set = |name: &str| lookup(name).is_some_and(|v| !v.is_empty());
    if !set("AWS_ENDPOINT_URL") {
        return EmulatorFallbacks {
            static_credentials: false,
            default_region: false,
        };
    }
    let credentials_configured = profile_files
        || [
            "AWS_ACCESS_KEY_ID",
            "AWS_PROFILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_CONFIG_FILE",
        ]
        .into_iter()
        .any(set);
    let region_configured =
        profile_files || set("AWS_REGION") || set("AWS_DEFAULT_REGION") || set("AWS_PROFILE");
    EmulatorFallbacks {
        static_credentials: !credentials_configured,
        default_region: !region_configured,
    }
}

fn profile_files_exist() -> bool {
    std::env::var_os("HOME").is_some_and(|home| {
        let dir = std::path::Path::new(&home).join(".aws");
        dir.join("config").exists() || dir.join("credentials").exists()
    })
}

fn emulator_credentials() -> Credentials {
    Credentials::new(
        EMULATOR_ACCESS_KEY,
        EMULATOR_ACCESS_KEY,
        None,
        None,
        "agentlane-emulator",
    )
}

/// The SDK configuration from the standard sources (`AWS_ENDPOINT_URL`, `AWS_REGION`,
/// credentials chain, profiles). When `AWS_ENDPOINT_URL` is set and no credentials (or region)
/// are configured, static test credentials (and `us-east-1`) are used, so an emulator works with
/// zero configuration.
pub async fn sdk_config() -> SdkConfig {
    let lookup = |name: &str| std::env::var(name).ok();
    let fallbacks = emulator_fallbacks(&lookup, profile_files_exist());
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if fallbacks.static_credentials {
        loader = loader.credentials_provider(emulator_credentials());
    }
    if fallbacks.default_region {
        loader = loader.region(Region::new(EMULATOR_REGION));
    }
    loader.load().await
}

/// A configuration for an emulator at `endpoint` (e.g. `http://127.0.0.1:4566`): static test
/// credentials and `us-east-1`, whatever the environment says.
pub async fn emulator_sdk_config(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new(EMULATOR_REGION))
        .credentials_provider(emulator_credentials())
        .load()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn defaults_without_environment() {
        let config = AwsConfig::from_lookup(env(&[])).unwrap_or_default();
        assert_eq!(config, AwsConfig::default());
        assert_eq!(config.table, "agentlane");
        assert_eq!(config.queue_name, "agentlane-turns.fifo");
        assert_eq!(config.dlq_name, "agentlane-turns-dlq.fifo");
        assert_eq!(config.queue_url, None);
    }

    #[test]
    fn environment_overrides_and_derives_the_dlq_name() {
        let config = AwsConfig::from_lookup(env(&[
            ("AGENTLANE_TABLE", "table-1"),
            ("AGENTLANE_QUEUE_NAME", "q1.fifo"),
            ("AGENTLANE_QUEUE_URL", ""),
            ("AGENTLANE_MAX_RECEIVE_COUNT", "7"),
            ("AGENTLANE_TENANT_LANES", "6"),
        ]));
        assert_eq!(
            config,
            Ok(AwsConfig {
                table: "table-1".into(),
                queue_name: "q1.fifo".into(),
                queue_url: None,
                dlq_name: "q1-dlq.fifo".into(),
                max_receive_count: 7,
                visibility_timeout_secs: DEFAULT_VISIBILITY_TIMEOUT_SECS,
                tenant_lanes: 6,
                secrets_kms_key: None,
            })
        );
    }

    #[test]
    fn invalid_settings_are_refused() {
        for pairs in [
            &[("AGENTLANE_QUEUE_NAME", "standard-queue")][..],
            &[("AGENTLANE_TABLE", "a")][..],
            &[("AGENTLANE_MAX_RECEIVE_COUNT", "0")][..],
            &[("AGENTLANE_MAX_RECEIVE_COUNT", "lots")][..],
            &[("AGENTLANE_DLQ_NAME", "agentlane-turns.fifo")][..],
            &[("AGENTLANE_TENANT_LANES", "10001")][..],
            &[("AGENTLANE_TENANT_LANES", "-1")][..],
        ] {
            let lookup = |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            };
            assert!(
                matches!(
                    AwsConfig::from_lookup(lookup),
                    Err(SetupError::InvalidConfig(_))
                ),
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn emulator_fallbacks_apply_only_to_an_unconfigured_endpoint() {
        let none = EmulatorFallbacks {
            static_credentials: false,
            default_region: false,
        };
        assert_eq!(emulator_fallbacks(&env(&[]), false), none);
        assert_eq!(
            emulator_fallbacks(
                &env(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")]),
                false
            ),
            EmulatorFallbacks {
                static_credentials: true,
                default_region: true,
            }
        );
        assert_eq!(
            emulator_fallbacks(
                &env(&[
                    ("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"),
                    ("AWS_ACCESS_KEY_ID", "AKIA"),
                    ("AWS_REGION", "eu-west-1"),
                ]),
                false
            ),
            none
        );
        assert_eq!(
            emulator_fallbacks(&env(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")]), true),
            none
        );
    }
}

//! What can be wrong with the configuration. Every message names the file key or the
//! environment variable at fault, and never a secret.

use std::path::PathBuf;

/// A configuration agentlane refuses to start with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file `AGENTLANE_CONFIG` names cannot be read.
    #[error("cannot read the config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the schema (e.g. an unknown key).
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A value in the file is not acceptable.
    #[error("{file}: {key}: {message}")]
    Invalid {
        file: String,
        key: String,
        message: String,
    },
    /// An environment variable holds a value that is not acceptable.
    #[error("{var}: {message}")]
    Env { var: String, message: String },
    /// An auth profile reads its key from an environment variable that is not set.
    #[error(
        "{file}: providers.{provider}, profile {profile:?}: api_key_env names {var}, which is not set"
    )]
    UnsetKeyEnv {
        file: String,
        provider: String,
        profile: String,
        var: String,
    },
}

//! What can be wrong with the configuration. Every message names the file key or the
//! environment variable at fault, and never a secret.

use std::path::PathBuf;

/// A configuration agentlane refuses to start with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file `AGENTLANE_CONFIG` names cannot be read.
    #[error("cannot read the config file {}: {source}", path.display())]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// Why reading it failed.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the schema (e.g. an unknown key).
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        /// The config file's path.
        file: String,
        /// The line of the error, from 1.
        line: usize,
        /// The column of the error, from 1.
        column: usize,
        /// What the parser objected to.
        message: String,
    },
    /// A value in the file is not acceptable.
    #[error("{file}: {key}: {message}")]
    Invalid {
        /// The config file's path.
        file: String,
        /// The key at fault, dotted (e.g. `runner.max_tool_rounds`).
        key: String,
        /// Why the value is refused and what is accepted.
        message: String,
    },
    /// An environment variable holds a value that is not acceptable.
    #[error("{var}: {message}")]
    Env {
        /// The variable at fault.
        var: String,
        /// Why the value is refused and what is accepted.
        message: String,
    },
    /// An auth profile reads its key from an environment variable that is not set.
    #[error(
        "{file}: providers.{provider}, profile {profile:?}: api_key_env names {var}, which is not set"
    )]
    UnsetKeyEnv {
        /// The config file's path.
        file: String,
        /// The provider's name in `[providers.<name>]`.
        provider: String,
        /// The auth profile's name.
        profile: String,
        /// The environment variable `api_key_env` names.
        var: String,
    },
}

//! The host wiring: settings from the config file reach the model router; each Lambda function
//! links only what it calls.
//!
//! The modules are `cfg(test)` (always true here) so that clippy treats their helpers as test
//! code too: `clippy.toml` allows `unwrap`/`expect` in tests.

#[cfg(test)]
mod config_router;
#[cfg(test)]
mod lambda_links;

//! The cron Lambda's tick on real EventBridge scheduled-event JSON.
//!
//! The modules are `cfg(test)` (always true here) so that clippy treats their helpers as test
//! code too: `clippy.toml` allows `unwrap`/`expect` in tests.

#[cfg(test)]
mod support;
#[cfg(test)]
mod sweep;
#[cfg(test)]
mod tick;

//! The HTTP API end to end in process: the real router over the SQLite backend, a manual clock
//! and two tenants (`common`), with the runner played through the `Store` API.
//!
//! The modules are `cfg(test)` (always true here) so that clippy treats their helpers as test
//! code too: `clippy.toml` allows `unwrap`/`expect` in tests.

#[cfg(test)]
mod agent;
#[cfg(test)]
mod agents_auth;
#[cfg(test)]
mod catalog;
#[cfg(test)]
mod common;
#[cfg(test)]
mod cron;
#[cfg(test)]
mod diagnostic;
#[cfg(test)]
mod faults;
#[cfg(test)]
mod openai;
#[cfg(test)]
mod openapi;
#[cfg(test)]
mod runs;
#[cfg(test)]
mod sessions;

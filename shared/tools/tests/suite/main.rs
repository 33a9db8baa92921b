//! The tools against real servers on loopback.
//!
//! The modules are `cfg(test)` (always true here) so that clippy treats their helpers as test
//! code too: `clippy.toml` allows `unwrap`/`expect` in tests.

#[cfg(test)]
mod http_fetch;

#[cfg(test)]
mod http_tool;
#[cfg(test)]
mod mcp;
#[cfg(test)]
mod oauth;

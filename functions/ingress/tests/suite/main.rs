//! The ingress Lambda on real API Gateway HTTP API (payload 2.0) events.
//!
//! The modules are `cfg(test)` (always true here) so that clippy treats their helpers as test
//! code too: `clippy.toml` allows `unwrap`/`expect` in tests.

#[cfg(test)]
mod api_gateway;

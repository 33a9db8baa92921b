//! The model providers over real HTTP: an in-process mock server streaming SSE shaped like each
//! API (`mock`), and one round trip against the real aimock.
//!
//! The modules are `cfg(test)` (always true here) so that clippy treats their helpers as test
//! code too: `clippy.toml` allows `unwrap`/`expect` in tests.

#[cfg(test)]
mod anthropic;
#[cfg(test)]
mod mock;
#[cfg(test)]
mod openai;
#[cfg(test)]
mod transport;

//! The runner Lambda's handler: batches of real SQS FIFO event JSON, on fixtures and on
//! messages received from the AWS emulator.
//!
//! The modules are `cfg(test)` (always true here) so that clippy treats their helpers as test
//! code too: `clippy.toml` allows `unwrap`/`expect` in tests.

#[cfg(test)]
mod batch;
#[cfg(test)]
mod emulator;
#[cfg(test)]
mod invocation;

//! The runner Lambda's handler on the AWS emulator: messages received from a real FIFO queue,
//! framed as the SQS event Lambda delivers, through the real lane worker.
//!
//! The modules are `cfg(test)` (always true here) so that clippy treats their helpers as test
//! code too: `clippy.toml` allows `unwrap`/`expect` in tests.

#[cfg(test)]
mod emulator;
#[cfg(test)]
mod invocation;
#[cfg(test)]
mod settle;

//! The runner Lambda's handler, one SQS FIFO batch per invocation:
//!
//! - [`handle_batch`]: the batch in, the failed records out (`ReportBatchItemFailures`), FIFO
//!   order kept per message group.
//! - [`RunnerFunction`]: one invocation — the batch through the lane worker, with every turn
//!   still running shortly before the invocation's deadline cancelled and handed back.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

mod batch;
mod invocation;

pub use batch::handle_batch;
pub use invocation::RunnerFunction;

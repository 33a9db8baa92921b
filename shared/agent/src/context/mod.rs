//! What the model gets to see, as pure functions over the session's history:
//!
//! - [`history`]: the model's view of a transcript (the latest compaction summary replaces what
//!   it covers) and the last-N-turns limit.
//! - [`precheck`]: the token budget before every model call and the tool-result size caps.
//! - [`compaction`]: the summarizing request and the history that replaces the summarized part.
//! - [`relief`]: compaction inside a run — what relieves a tool loop's prompt over its budget
//!   (cut the earlier rounds' results, summarise), cheapest first.
//! - [`tokens`]: the rough token estimate (about four characters a token).
//! - [`repair`]: tool_use / tool_result pairing repair.
//! - [`cache`]: the decoded transcripts of the sessions the runner serves.

pub mod cache;
pub mod compaction;
pub mod history;
pub mod precheck;
pub mod relief;
pub mod repair;
pub mod tokens;

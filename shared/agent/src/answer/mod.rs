//! What the model answered, made safe to act on and fit to show:
//!
//! - [`normalize`]: the assistant turn's tool calls sanitized, promoted from text, and their
//!   names resolved, before any of them runs.
//! - [`reply`]: the final payloads, the silent token, and held-back answer starts.

pub mod normalize;
pub mod reply;

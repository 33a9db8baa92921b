//! Runner settings (SPEC §12 defaults).

use std::time::Duration;

/// How the runner behaves. `Default` gives the SPEC defaults.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Session lock lease; renewed every third of it while the run lives.
    pub lock_lease: Duration,
    /// How long to wait for a busy session's lock before handing the message back.
    pub lock_acquire_timeout: Duration,
    /// Visibility of a delivery while it is worked on; extended every third of it.
    pub visibility_timeout: Duration,
    /// How long one receive waits for a message (long polling). Zero polls without waiting and
    /// pauses briefly when the queue is empty.
    pub receive_wait: Duration,
    /// No stream chunk for this long aborts a model call (cloud providers).
    pub model_idle_timeout: Duration,
    /// The same, for self-hosted providers.
    pub model_idle_timeout_self_hosted: Duration,
    /// Run timeout when the request names none (48 h). `timeoutSeconds: 0` means unlimited.
    pub default_run_timeout: Duration,
    /// How often the abort flag is read while a run works.
    pub abort_poll: Duration,
    /// Tool rounds allowed in one turn before it fails (a runaway tool loop costs money).
    pub max_tool_rounds: u32,
    /// Multiplies every model-retry backoff. 1.0 in production, where backoffs are jittered
    /// ±20 %; tests shrink waits with it, and a scaled backoff is exact (no jitter).
    pub retry_delay_scale: f64,
    /// The timeout of a tool call when the tool declares none of its own (60 s).
    pub tool_timeout: Duration,
    /// Base system prompt.
    pub system_prompt: String,
    /// Bootstrap context documents `(name, text)` added to every system prompt.
    pub bootstrap_context: Vec<(String, String)>,
    /// Only the last N user turns of history are sent (older ones stay in the transcript).
    pub history_max_turns: Option<u32>,
    /// Assistant deltas are coalesced into one event until this many bytes or `delta_flush`.
    pub delta_flush_bytes: usize,
    /// The longest time deltas are coalesced before an event is written (150 ms by default).
    pub delta_flush: Duration,
    /// How long the message of a run that found an earlier run of its session unfinished stays
    /// invisible before it comes back (so a misbehaving queue neither spins on it nor keeps a
    /// worker waiting for the lane's lock). Jittered ±20 %.
    pub out_of_order_pause: Duration,
    /// How long the message of a pickup that failed (a store error, a lock lost to another
    /// writer) stays invisible before it comes back, on both hosts (the local worker and the
    /// runner Lambda): long enough not to spin on a store that is down, short next to the
    /// visibility timeout. The failed pickup releases the session's lock, so the next one
    /// does not wait for its lease to end. Default 5 s, jittered ±20 %.
    pub failed_pickup_pause: Duration,
    /// How long after its accept a queued run that was never picked up counts as one whose
    /// lane message was never sent (the accepting process died between the accept and the
    /// enqueue), when a later run of its session is delivered while the lane is free: the
    /// worker then sends the earlier run's message again and moves the delivered one behind it.
    /// Default 5 s (the accept and the enqueue are milliseconds apart).
    pub unsent_after: Duration,
    /// Failed deliveries of one run (not clean hand-backs) before its next pickup ends it
    /// `error`/`poisoned` instead of running it again (`AGENTLANE_MAX_FAILED_PICKUPS`; 0: no cap).
    pub max_failed_pickups: u32,
    /// `collect` mode: the quiet window a collect run waits for before it takes the collect
    /// messages of its session (`[queue] collect_window_ms`, `AGENTLANE_COLLECT_WINDOW_MS`;
    /// default 500 ms; 0: no wait).
    pub collect_window: Duration,
    /// Run every tool batch one call at a time, with a steering checkpoint before each launch
    /// (`[tools] execution = "sequential"`, `AGENTLANE_TOOL_EXECUTION`); otherwise only a batch
    /// that calls a [sequential](agentlane_tools::Tool::sequential) tool does, and the others
    /// run their calls concurrently.
    pub sequential_tools: bool,
    /// The prices attempts are charged by (`costUsd`), and budgets checked with.
    pub prices: agentlane_core::spend::PriceTable,
    /// The output half of the worst case a budget holds for a call whose provider sends no
    /// output cap (every request sets one, so only a provider that ignores it uses this).
    pub budget_output_reserve: u64,
    /// The decoded transcripts of the sessions this runner serves are kept up to about this
    /// many bytes (least recently used evicted), so a turn does not read and decode its whole
    /// session again (`AGENTLANE_TRANSCRIPT_CACHE_MB`, default 64; 0 turns the cache off).
    pub transcript_cache_bytes: usize,
    /// A transcript shorter than this many entries is not cached (read again at its next
    /// turn): on SQLite such a read is cheaper than holding it, so idle sessions of a few turns
    /// cost no memory; on DynamoDB each read is a request (0: every transcript is cached).
    pub transcript_cache_min_entries: usize,
    /// How long the start of a fresh turn may be held back to go with the turn's next write
    /// (its first streamed text, its first tool call, its end), so a quick turn writes once
    /// (`AGENTLANE_START_HOLD_MS`, default 200 ms; 0 writes every start at once). Until then
    /// the run reads `queued`; a pickup that dies meanwhile is not counted.
    pub start_hold: Duration,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            lock_lease: Duration::from_secs(30),
            lock_acquire_timeout: Duration::from_secs(60),
            visibility_timeout: Duration::from_secs(30),
            receive_wait: Duration::from_secs(1),
            model_idle_timeout: Duration::from_secs(120),
            model_idle_timeout_self_hosted: Duration::from_secs(300),
            default_run_timeout: Duration::from_secs(48 * 3600),
            abort_poll: Duration::from_millis(500),
            max_tool_rounds: 64,
            retry_delay_scale: 1.0,
            tool_timeout: Duration::from_secs(60),
            system_prompt:
                "You are a helpful assistant. Use the tools you are given when they help \
                            answer; answer concisely."
                    .to_owned(),
            bootstrap_context: Vec::new(),
            history_max_turns: None,
            delta_flush_bytes: 512,
            delta_flush: Duration::from_millis(150),
            out_of_order_pause: Duration::from_secs(1),
            failed_pickup_pause: Duration::from_secs(5),
            unsent_after: Duration::from_secs(5),
            max_failed_pickups: 5,
            collect_window: Duration::from_millis(500),
            sequential_tools: false,
            prices: agentlane_core::spend::PriceTable::builtin(),
            budget_output_reserve: 4096,
            transcript_cache_bytes: 64 << 20,
            transcript_cache_min_entries: 0,
            start_hold: Duration::from_millis(200),
        }
    }
}

//! The `agentlane` binary: parses the command line and runs [`agentlane_cli::main`].
#![warn(unreachable_pub)]
#![warn(missing_docs)]

/// mimalloc instead of glibc's malloc for the CLI and `serve`: a turn makes thousands of small
/// allocations across threads (the HTTP tasks, the lane workers, the SQLite writer thread), and
/// glibc's allocator took 12-14 % of `bench --http`'s samples (`_int_malloc`, `_int_free`,
/// `malloc_consolidate`, `unlink_chunk`); mimalloc's per-thread free lists cost less
/// (docs/perf/2026-12-06-stop-36-reads-after-writes.md). The Lambda functions keep the system
/// allocator (their zip budget).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    agentlane_cli::main()
}

//! The server under test (`agentlane-under-test`): the `agentlane` command, built fresh with
//! the end-to-end tests so they never run a stale binary.
#![warn(missing_docs)]

fn main() -> std::process::ExitCode {
    agentlane_cli::main()
}

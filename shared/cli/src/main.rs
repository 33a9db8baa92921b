//! The `agentlane` binary: parses the command line and runs [`agentlane_cli::main`].
#![warn(unreachable_pub)]
#![warn(missing_docs)]
fn main() -> std::process::ExitCode {
    agentlane_cli::main()
}

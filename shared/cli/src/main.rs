#![warn(unreachable_pub)]
fn main() -> std::process::ExitCode {
    agentlane_cli::main()
}

fn main() -> std::process::ExitCode {
    agentlane_cli::main()
}

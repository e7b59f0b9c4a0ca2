//! `leasehold-agent [--config FILE]`: one pod, serving permits over local HTTP.
fn main() -> std::process::ExitCode {
    leasehold_pod::agent_main(leasehold_process::ConfigArgs::from_command_line())
}

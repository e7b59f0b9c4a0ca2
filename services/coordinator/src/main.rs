//! `leasehold-coordinator [--config FILE]`: run one coordinator replica.
fn main() -> std::process::ExitCode {
    leasehold_coordinator::main(leasehold_process::ConfigArgs::from_command_line())
}

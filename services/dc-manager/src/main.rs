//! `leasehold-dc-manager [--config FILE]`: one DC manager replica.
fn main() -> std::process::ExitCode {
    leasehold_dc_manager::main(leasehold_process::ConfigArgs::from_command_line())
}

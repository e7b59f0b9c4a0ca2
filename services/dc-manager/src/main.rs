//! `leasehold-dc-manager [--config FILE]`: one DC manager replica.
#[global_allocator]
static ALLOCATOR: leasehold_process::Allocator = leasehold_process::Allocator;

fn main() -> std::process::ExitCode {
    leasehold_process::keep_freed_memory();
    leasehold_dc_manager::main(leasehold_process::ConfigArgs::from_command_line(
        leasehold_dc_manager::settings::settings_help(),
    ))
}

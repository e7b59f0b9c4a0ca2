//! `leasehold-coordinator [--config FILE]`: run one coordinator replica.
#[global_allocator]
static ALLOCATOR: leasehold_process::Allocator = leasehold_process::Allocator;

fn main() -> std::process::ExitCode {
    leasehold_process::keep_freed_memory();
    leasehold_coordinator::main(leasehold_process::ConfigArgs::from_command_line(
        leasehold_coordinator::settings::settings_help(),
    ))
}

//! `leasehold-agent [--config FILE]`: one pod, serving permits over local HTTP.
#[global_allocator]
static ALLOCATOR: leasehold_process::Allocator = leasehold_process::Allocator;

fn main() -> std::process::ExitCode {
    leasehold_process::keep_freed_memory();
    leasehold_pod::agent_main(leasehold_process::ConfigArgs::from_command_line(
        leasehold_pod::settings::PodSettings::help(),
    ))
}

//! `leasehold-dc-manager [--config FILE]`: one DC manager replica.
fn main() -> std::process::ExitCode {
    leasehold_dc_manager::main_with_args(std::env::args().skip(1).collect())
}

//! `leasehold-coordinator [--config FILE]`: run one coordinator replica.
fn main() -> std::process::ExitCode {
    leasehold_coordinator::main_with_args(std::env::args().skip(1).collect())
}

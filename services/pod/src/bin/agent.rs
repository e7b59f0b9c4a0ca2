//! `leasehold-agent [--config FILE]`: one pod, serving permits over local HTTP.
fn main() -> std::process::ExitCode {
    leasehold_pod::agent_main(std::env::args().skip(1).collect())
}

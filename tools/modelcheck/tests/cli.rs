//! The binary as a shell uses it.

use std::io::Read;
use std::process::{Command, Stdio};

/// `leasehold-modelcheck --help | head -1`: the reader goes away after one line; the run ends
/// quietly with success, not with a panic on the broken pipe.
#[test]
fn a_reader_that_goes_away_ends_the_run_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold-modelcheck"))
        .arg("--help")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    drop(child.stdout.take()); // nobody reads: every write finds the pipe closed
    let status = child.wait().expect("ends");
    let mut stderr = String::new();
    child.stderr.take().expect("piped").read_to_string(&mut stderr).expect("reads");
    assert!(status.success(), "{status}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

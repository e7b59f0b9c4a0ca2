//! Tests of `tools/lab/src/chaos/report.rs`.

use leasehold_lab::chaos::report::*;

#[test]
fn a_log_line_names_its_step_by_key_as_before() {
    let fault = LogEntry { t_s: 1.5, step: Step::Fault("partition_dc"), what: "cut bkk".into() };
    let heal = LogEntry { t_s: 9.0, step: Step::Heal("partition_dc"), what: "joined bkk".into() };
    assert_eq!(
        serde_json::to_value(&fault).unwrap(),
        serde_json::json!({ "t_s": 1.5, "fault": "partition_dc", "what": "cut bkk" })
    );
    assert_eq!(
        serde_json::to_value(&heal).unwrap(),
        serde_json::json!({ "t_s": 9.0, "heal": "partition_dc", "what": "joined bkk" })
    );
}

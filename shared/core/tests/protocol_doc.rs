//! docs/PROTOCOL.md's subject and KV tables name exactly what `shared::subjects` does: a subject,
//! bucket or key added, renamed or dropped on one side fails here until the other follows.

use leasehold_core::subjects::{KV_KEYS, SUBJECTS};
use std::collections::BTreeSet;

const PROTOCOL: &str = include_str!("../../../docs/PROTOCOL.md");

/// The cells of every table row, backticks removed.
fn rows() -> Vec<Vec<String>> {
    PROTOCOL
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .map(|l| l.trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect())
        .collect()
}

fn plain(cell: &str) -> String {
    cell.replace('`', "")
}

/// The backticked names in a cell.
fn names(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(String::from).collect()
}

#[test]
fn the_subject_table_is_the_code_s() {
    let documented: BTreeSet<(String, String, String)> = rows()
        .into_iter()
        .filter(|r| r.len() == 3 && r[0].starts_with("`lh."))
        .map(|r| (plain(&r[0]), plain(&r[1]), plain(&r[2])))
        .collect();
    let code: BTreeSet<(String, String, String)> =
        SUBJECTS.iter().map(|e| (e.pattern.into(), e.direction.into(), e.message.into())).collect();
    assert_eq!(documented, code, "docs/PROTOCOL.md's subject table and shared::subjects::SUBJECTS differ");
}

#[test]
fn the_kv_table_is_the_code_s() {
    let mut documented = BTreeSet::new();
    for row in rows().into_iter().filter(|r| r.len() == 3 && r[0].starts_with("`lh_")) {
        let bucket = names(&row[0]).into_iter().next().expect("a bucket name");
        for key in names(&row[1]) {
            documented.insert((bucket.clone(), key));
        }
        let code_values: Vec<&str> = KV_KEYS.iter().filter(|e| e.bucket == bucket).map(|e| e.value).collect();
        assert!(
            code_values.iter().any(|v| plain(&row[2]).contains(v)),
            "the row for {bucket} names none of {code_values:?} as its value"
        );
    }
    let code: BTreeSet<(String, String)> = KV_KEYS.iter().map(|e| (e.bucket.into(), e.key.into())).collect();
    assert_eq!(documented, code, "docs/PROTOCOL.md's KV table and shared::subjects::KV_KEYS differ");
}

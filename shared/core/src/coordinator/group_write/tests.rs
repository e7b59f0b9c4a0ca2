use super::*;
use crate::subjects::ledger_group_of;
use crate::wire::{encode, LedgerRecord};
use GroupWriteAnswer::{Conflict, Unknown, Written};

fn record(limit: usize, epoch: u64, writer: &str) -> LedgerRecord {
    LedgerRecord::empty(&name(limit), epoch, writer)
}

/// The `i`th limit name of group 0.
fn name(i: usize) -> String {
    (0..).map(|n| format!("l{n}")).filter(|n| ledger_group_of(n) == 0).nth(i).expect("names are endless")
}

fn group(records: Vec<LedgerRecord>) -> Vec<u8> {
    let bytes = encode(&LedgerGroup::new(0, records));
    assert!(decode::<LedgerGroup>(&bytes).is_ok(), "a valid group");
    bytes
}

const EPOCH: u64 = 40;
const ME: &str = "coord-a";

fn judge(answer: GroupWriteAnswer, expected: Option<u64>, ours: &[u8], read_back: GroupReadBack<'_>) -> GroupWrite {
    judge_group_write(answer, expected, ours, read_back, EPOCH, ME, Some(EPOCH))
}

#[test]
fn a_written_answer_is_stored_whatever_a_read_would_say() {
    let ours = group(vec![record(0, EPOCH, ME)]);
    assert_eq!(
        judge(Written { revision: 8 }, Some(7), &ours, GroupReadBack::Unreadable),
        GroupWrite::Landed { revision: 8 }
    );
}

#[test]
fn an_unknown_outcome_with_the_group_unreadable_keeps_the_term() {
    // Every NATS server restarting: the write timed out and so did the read.
    let ours = group(vec![record(0, EPOCH, ME)]);
    assert_eq!(judge(Unknown, Some(7), &ours, GroupReadBack::Unreadable), GroupWrite::Unresolved);
    assert_eq!(judge(Conflict, Some(7), &ours, GroupReadBack::Unreadable), GroupWrite::Unresolved);
}

#[test]
fn an_unknown_outcome_is_stored_if_the_read_shows_exactly_this_write() {
    let ours = group(vec![record(0, EPOCH, ME)]);
    let read_back = GroupReadBack::Stored { revision: 8, bytes: &ours };
    assert_eq!(judge(Unknown, Some(7), &ours, read_back), GroupWrite::Landed { revision: 8 });
}

#[test]
fn a_group_still_at_the_expected_revision_is_unresolved() {
    let ours = group(vec![record(0, EPOCH, ME)]);
    let before = group(vec![record(0, EPOCH, ME), record(1, EPOCH, ME)]);
    let read_back = GroupReadBack::Stored { revision: 7, bytes: &before };
    assert_eq!(judge(Unknown, Some(7), &ours, read_back), GroupWrite::Unresolved);
    // A create not landed yet.
    assert_eq!(judge(Unknown, None, &ours, GroupReadBack::Absent), GroupWrite::Unresolved);
}

#[test]
fn an_earlier_write_of_this_term_landing_late_is_adopted() {
    let ours = group(vec![record(0, EPOCH, ME)]);
    let earlier = group(vec![record(0, EPOCH, ME), record(1, EPOCH, ME)]);
    let read_back = GroupReadBack::Stored { revision: 8, bytes: &earlier };
    assert_eq!(judge(Conflict, Some(7), &ours, read_back), GroupWrite::Adopted { revision: 8 });
    assert_eq!(judge(Unknown, Some(7), &ours, read_back), GroupWrite::Adopted { revision: 8 });
    assert_eq!(judge(Conflict, None, &ours, read_back), GroupWrite::Adopted { revision: 8 });
}

#[test]
fn a_group_anyone_else_wrote_ends_the_term() {
    let ours = group(vec![record(0, EPOCH, ME)]);
    for other in [
        group(vec![record(0, EPOCH + 1, "coord-b")]),
        group(vec![record(0, EPOCH, "coord-b")]),
        group(vec![record(0, EPOCH - 1, ME)]),
        // One record of another term is enough.
        group(vec![record(0, EPOCH, ME), record(1, EPOCH + 1, "coord-b")]),
        group(Vec::new()),
        b"not a group".to_vec(),
    ] {
        let read_back = GroupReadBack::Stored { revision: 8, bytes: &other };
        assert_eq!(judge(Conflict, Some(7), &ours, read_back), GroupWrite::Lost, "{}", String::from_utf8_lossy(&other));
        assert_eq!(judge(Unknown, Some(7), &ours, read_back), GroupWrite::Lost);
    }
}

#[test]
fn a_group_gone_or_rolled_back_under_the_term_ends_it() {
    let ours = group(vec![record(0, EPOCH, ME)]);
    assert_eq!(judge(Conflict, Some(7), &ours, GroupReadBack::Absent), GroupWrite::Lost);
    assert_eq!(judge(Unknown, Some(7), &ours, GroupReadBack::Absent), GroupWrite::Lost);
    // Older than the term last wrote, even if the term wrote that older value.
    let older = group(vec![record(0, EPOCH, ME), record(1, EPOCH, ME)]);
    let read_back = GroupReadBack::Stored { revision: 5, bytes: &older };
    assert_eq!(judge(Conflict, Some(7), &ours, read_back), GroupWrite::Lost);
}

#[test]
fn a_group_of_this_term_is_not_adopted_once_the_fence_names_a_newer_one() {
    // The bucket lost its tail back to this term's older record after a newer term wrote.
    let ours = group(vec![record(0, EPOCH, ME)]);
    let earlier = group(vec![record(0, EPOCH, ME), record(1, EPOCH, ME)]);
    let read_back = GroupReadBack::Stored { revision: 8, bytes: &earlier };
    for fence in [Some(EPOCH + 1), None] {
        let judged = judge_group_write(Conflict, Some(7), &ours, read_back, EPOCH, ME, fence);
        assert_eq!(judged, GroupWrite::Lost, "fence {fence:?}");
        // Nor a record the same as this write: the same older record, gone back to.
        let same = GroupReadBack::Stored { revision: 8, bytes: &ours };
        let judged = judge_group_write(Conflict, Some(7), &ours, same, EPOCH, ME, fence);
        assert_eq!(judged, GroupWrite::Lost, "fence {fence:?}");
    }
}

//! A full key table sheds new keys; it never forgets a key that still has admissions inside its
//! own window, whatever window the newcomer has.

use leasehold_per_key::table::TableError;
use leasehold_per_key::{Algorithm, KeyTable, LimitSpec};

#[test]
fn a_full_table_never_drops_a_log_with_admissions_inside_its_own_window() {
    let (minute, second) = (LimitSpec::sliding(2, 60_000), LimitSpec::sliding(5, 1_000));
    let mut table = KeyTable::new(2);
    assert!(table.check("slow", &minute, 1, 0).unwrap().allowed);
    assert!(table.check("slow", &minute, 1, 0).unwrap().allowed);
    assert!(table.check("fast", &second, 1, 0).unwrap().allowed);
    // Full. At 1.3 s a new key with a 1 s window arrives: "fast" has nothing left in its window
    // and makes room; "slow" still has two admissions inside its 60 s window and stays.
    assert!(table.check("new", &second, 1, 1_300).unwrap().allowed);
    let third = table.check("slow", &minute, 1, 1_300).unwrap();
    assert!(!third.allowed, "a 3rd admission 1.3 s into a 2-per-60 s window: {third:?}");
    assert_eq!(third.retry_after_ms, 60_000 - 1_300);
    // With no room to make, a newcomer is shed; nobody's log is touched.
    assert_eq!(table.check("another", &second, 1, 1_400), Err(TableError::Full(2)));
    assert!(!table.check("slow", &minute, 1, 1_400).unwrap().allowed);
}

#[test]
fn the_periodic_sweep_keeps_each_key_for_the_longer_of_its_window_and_the_tiers_longest() {
    let (minute, second) = (LimitSpec::sliding(2, 60_000), LimitSpec::sliding(5, 1_000));
    let mut table = KeyTable::new(10);
    table.check("slow", &minute, 1, 0).unwrap();
    table.check("fast", &second, 1, 0).unwrap();
    // The tiers' longest window is 1 s now (the 60 s tier was edited away): "slow" still counts
    // what it was admitted under its 60 s window until that window has passed.
    table.sweep(2_000, 1_000);
    assert!(table.state("slow").is_some() && table.state("fast").is_none());
    table.sweep(60_000, 1_000);
    assert!(table.state("slow").is_none());
}

#[test]
fn a_read_of_an_exhausted_key_says_a_request_would_be_denied_and_when_it_would_not() {
    for spec in
        [LimitSpec::sliding(2, 60_000), LimitSpec { algorithm: Algorithm::Gcra, ..LimitSpec::sliding(2, 60_000) }]
    {
        let mut table = KeyTable::new(10);
        let (_, fresh) = table.peek("k", &spec, 0).unwrap();
        assert!(fresh.allowed && fresh.retry_after_ms == 0, "{spec:?}: {fresh:?}");
        while table.check("k", &spec, 1, 1_000).unwrap().allowed {}
        let (count, read) = table.peek("k", &spec, 1_500).unwrap();
        let denied = table.check("k", &spec, 1, 1_500).unwrap();
        assert!(!read.allowed && !denied.allowed, "{spec:?}: read {read:?}");
        assert_eq!(read.retry_after_ms, denied.retry_after_ms, "{spec:?}");
        assert_eq!(table.peek("k", &spec, 1_500).unwrap().0, count, "{spec:?}: a read recorded something");
    }
}

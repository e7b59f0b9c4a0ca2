//! Tests of `tools/lab/src/demo/observe.rs`.

use leasehold_lab::demo::observe::*;

#[test]
fn correlation_sees_following_and_opposing_series() {
    let x = [0.1, 0.3, 0.5, 0.7];
    assert!(correlation(&x, &[0.2, 0.35, 0.5, 0.66]).unwrap() > 0.99);
    assert!(correlation(&x, &[0.7, 0.5, 0.3, 0.1]).unwrap() < -0.99);
    assert_eq!(correlation(&x, &[0.5; 4]), None);
}

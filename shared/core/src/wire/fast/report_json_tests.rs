//! The fast reader against serde: whatever it reads, serde reads the same; what it leaves,
//! serde decides.

use super::*;
use crate::wire::PodReports;
use proptest::prelude::*;

/// serde's answer, the value compared by its `Debug` text (so `-0.0` and `0.0` differ).
fn by_serde(bytes: &[u8]) -> Result<String, WireError> {
    decode::<PodReports>(bytes).map(|b| format!("{b:?}"))
}

/// The fast reader takes `bytes` only as serde does, and [`decode_pod_reports`] answers as
/// serde does. Returns whether the fast reader took it.
fn agrees(bytes: &[u8]) -> bool {
    let serde = by_serde(bytes);
    let read = read_pod_reports(bytes);
    if let Some(batch) = &read {
        let parsed: Result<PodReports, _> = serde_json::from_slice(bytes);
        let parsed =
            parsed.unwrap_or_else(|e| panic!("read fast, refused by serde ({e}): {}", String::from_utf8_lossy(bytes)));
        assert_eq!(format!("{batch:?}"), format!("{parsed:?}"), "{}", String::from_utf8_lossy(bytes));
    }
    let both = decode_pod_reports(bytes).map(|b| format!("{b:?}"));
    match (&both, &serde) {
        (Err(WireError::Malformed(_)), Err(WireError::Malformed(_))) => {}
        _ => assert_eq!(both, serde, "{}", String::from_utf8_lossy(bytes)),
    }
    read.is_some()
}

const ITEM: &str = r#"{"v":1,"limit":"api","dc":"bkk","pod":"p1","incarnation":7,"seq":3,"interval_ms":250,"offered":4,"admitted":4,"rejected":0,"queued":0,"errors":0,"healthy":true,"draining":false,"weight":1.0,"lease_in_use":{"epoch":1,"seq":2}}"#;

fn batch_of(items: &[&str]) -> String {
    format!(r#"{{"v":2,"dc":"bkk","pod":"p1","reports":[{}]}}"#, items.join(","))
}

#[test]
fn the_shapes_pods_write_are_read_fast() {
    let compact = batch_of(&[ITEM, &ITEM.replace("\"api\"", "\"api-2\"")]);
    assert!(agrees(compact.as_bytes()));
    // Another language's encoder: spaces after separators, keys in another order, optional
    // fields written or left out, `null` for no lease.
    let spaced = r#" { "reports" : [ { "pod": "p1", "dc": "bkk", "limit": "api", "weight": 2, "v": 1, "incarnation": 18446744073709551615,
        "seq": 1, "interval_ms": 1000, "offered": 0, "admitted": 0, "rejected": 0, "queued": 0, "errors": 0, "upstream_429": 3,
        "healthy": false, "draining": true, "lease_in_use": null, "periods": 4 } ], "pod": "p1", "dc": "bkk", "v": 2 }
"#;
    assert!(agrees(spaced.as_bytes()));
    assert!(agrees(batch_of(&[]).as_bytes()));
    let without_optional = ITEM.replace(r#""v":1,"#, "").replace(r#","lease_in_use":{"epoch":1,"seq":2}"#, "");
    assert!(agrees(batch_of(&[&without_optional]).as_bytes()));
    let read = read_pod_reports(batch_of(&[&without_optional]).as_bytes()).unwrap();
    assert_eq!((read.reports[0].v, read.reports[0].lease_in_use, read.reports[0].periods), (1, None, 1));
}

#[test]
fn what_it_does_not_read_goes_to_serde_with_the_same_answer() {
    let item = |from: &str, to: &str| batch_of(&[&ITEM.replacen(from, to, 1)]);
    // Left to serde (the reader does not take them), each answered as serde answers.
    let left = [
        item("\"api\"", r#""a\"pi""#),                       // an escape in a value
        item(r#""seq":3"#, r#""\u0073eq":3"#),               // an escape in a key
        item(r#""seq":3"#, r#""seq":-0"#),                   // serde: a float, refused
        item(r#""seq":3"#, r#""seq":3.0"#),                  // a float for an integer
        item(r#""seq":3"#, r#""seq":03"#),                   // a leading zero
        item(r#""seq":3"#, r#""seq":18446744073709551616"#), // past a u64
        item(r#""seq":3"#, r#""seq":3,"seq":4"#),            // a key twice
        item(r#""seq":3"#, r#""seq":3,"extra":[1]"#),        // an unknown key
        item(r#""seq":2}"#, r#""seq":2,"extra":0}"#),        // one inside lease_in_use
        item(r#""seq":2}"#, r#""seq":2,"seq":2}"#),
        item(r#","seq":3"#, ""),                      // a missing field
        item(r#""v":1"#, r#""v":4294967296"#),        // past a u32
        item(r#""weight":1.0"#, r#""weight":1e400"#), // past an f64
        item(r#""healthy":true"#, r#""healthy":null"#),
        item(r#"{"epoch":1,"seq":2}"#, "[1,2]"), // serde reads a struct as an array
        batch_of(&[ITEM]).replace(r#""v":2"#, r#""v":3"#), // another version
        batch_of(&[ITEM]).replace(r#""v":2,"#, ""), // no version
        batch_of(&[ITEM]).replace(r#""v":2,"#, r#""v":2,"v":2,"#),
        batch_of(&[ITEM]).replace(r#""v":2,"#, r#""v":2,"x":1,"#), // an unknown key on top
        batch_of(&[ITEM]) + "x",                                   // trailing bytes
        batch_of(&[ITEM]).replace("\"bkk\",\"pod\"", "\"b\u{1}k\",\"pod\""), // a control character
        batch_of(&[ITEM]).replace(":[", ":[ ,"),
        batch_of(&[ITEM]).replace("]}", ",]}"),
    ];
    for case in &left {
        assert!(!agrees(case.as_bytes()), "{case}");
    }
    let invalid_utf8 = [&br#"{"v":2,"dc":"b"#[..], &[0xff], br#"k","pod":"p1","reports":[]}"#].concat();
    assert!(!agrees(&invalid_utf8));
    // Read here, then refused by the same checks serde's value meets.
    let read_then_refused = [
        item(r#""weight":1.0"#, r#""weight":0"#), // out of range
        batch_of(&[ITEM, ITEM]),                  // a limit twice
        item(r#""v":1"#, r#""v":3"#),             // an item of another version
        item(r#""pod":"p1""#, r#""pod":"p2""#),   // another pod than the batch
    ];
    for case in &read_then_refused {
        assert!(agrees(case.as_bytes()), "{case}");
        assert!(matches!(decode_pod_reports(case.as_bytes()), Err(WireError::Invalid { .. })), "{case}");
    }
    // Read here, as serde reads them: other ways to write a number, and `\r` as whitespace.
    for weight in [
        "1E2",
        "-0",
        "0.5e-0",
        "1.00000000000000000000000000001",
        "100000000000000000000000",
        "0.1",
        "2",
        "0.3",
        "999.999999999999",
        "0.000000000000001",
        "1234567890.12345",
        "1234567890.123456",
    ] {
        let case = item(r#""weight":1.0"#, &format!(r#""weight":{weight}"#));
        assert!(agrees(case.as_bytes()), "{case}");
    }
    assert!(agrees(batch_of(&[ITEM]).replace(',', "\r\n,\r").as_bytes()));
}

/// `{"key":value,…}` with the pairs in the given order and `sep` between tokens.
fn object(pairs: &[(&str, String)], order: &[usize], sep: &str) -> String {
    let body: Vec<String> = order.iter().map(|&i| format!("\"{}\"{sep}:{sep}{}", pairs[i].0, pairs[i].1)).collect();
    format!("{{{sep}{}{sep}}}", body.join(&format!("{sep},{sep}")))
}

fn item_pairs(limit: &str, numbers: [u64; 10], weight: f64, lease: Option<(u64, u64)>) -> Vec<(&'static str, String)> {
    let json = |s: &str| serde_json::to_string(s).unwrap();
    let held = lease.map_or("null".to_string(), |(e, s)| {
        format!(r#"{{"quota":{{"rate_milli_per_s":{s},"burst_milli":{e}}},"left_ms":{}}}"#, numbers[3])
    });
    let lease = lease.map_or("null".to_string(), |(e, s)| format!(r#"{{"epoch":{e},"seq":{s}}}"#));
    vec![
        ("v", numbers[9].min(3).to_string()),
        ("limit", json(limit)),
        ("dc", json("bkk")),
        ("pod", json("p1")),
        ("incarnation", numbers[0].to_string()),
        ("seq", numbers[1].to_string()),
        ("interval_ms", numbers[2].to_string()),
        ("offered", numbers[3].to_string()),
        ("admitted", numbers[4].to_string()),
        ("rejected", numbers[5].to_string()),
        ("queued", numbers[6].to_string()),
        ("errors", numbers[7].to_string()),
        ("upstream_429", numbers[8].to_string()),
        ("healthy", numbers[0].is_multiple_of(2).to_string()),
        ("draining", numbers[1].is_multiple_of(3).to_string()),
        ("weight", serde_json::to_string(&weight).unwrap()),
        ("lease_in_use", lease),
        ("held", held),
        ("periods", (numbers[2] % 70_000).to_string()),
    ]
}

proptest! {
    /// Items of any values, keys in any order, optional keys left out, compact or spaced:
    /// read as serde reads them (and taken by the fast reader when their strings are plain).
    #[test]
    fn any_report_is_read_as_serde_reads_it(
        limits in proptest::collection::vec("(\\PC|[\"\\\\\u{0}-\u{1f}\u{7f}é€😀]){0,8}", 0..4),
        numbers in proptest::array::uniform10(prop_oneof![Just(0u64), Just(1), 1u64..1_000, Just(u64::MAX), any::<u64>()]),
        weight in prop_oneof![Just(1.0f64), Just(0.1), Just(-0.0), 0.0f64..2_000.0, any::<f64>().prop_filter("finite", |w| w.is_finite())],
        weight_text in proptest::option::of("(0|[1-9][0-9]{0,16})(\\.[0-9]{1,17})?"),
        lease in proptest::option::of((any::<u64>(), any::<u64>())),
        order in prop_oneof![Just((0..19).collect::<Vec<usize>>()), Just((0..19).collect::<Vec<usize>>()).prop_shuffle()],
        left_out in proptest::collection::vec(any::<bool>(), 5),
        spaced in any::<bool>(),
        top_order in prop_oneof![Just(vec![0usize, 1, 2, 3]), Just(vec![0usize, 1, 2, 3]).prop_shuffle()],
    ) {
        let sep = if spaced { " \n\t" } else { "" };
        // v, upstream_429, lease_in_use, held and periods may be left out.
        let optional = [0usize, 12, 16, 17, 18];
        let order: Vec<usize> = order.into_iter().filter(|i| optional.iter().zip(&left_out).all(|(o, out)| !(*out && o == i))).collect();
        let pairs_of = |l: &str| {
            let mut pairs = item_pairs(l, numbers, weight, lease);
            // A weight as another encoder writes it (up to 17 digits each side, so past the
            // 15 digits read without serde's help).
            if let Some(text) = &weight_text {
                pairs[15].1 = text.clone();
            }
            pairs
        };
        let items: Vec<String> = limits.iter().map(|l| object(&pairs_of(l), &order, sep)).collect();
        let top = [("v", "2".into()), ("dc", "\"bkk\"".into()), ("pod", "\"p1\"".into()), ("reports", format!("[{}]", items.join(",")))];
        let batch = object(&top, &top_order, sep);
        let plain = limits.iter().all(|l| !l.chars().any(|c| c == '"' || c == '\\' || c < '\u{20}'));
        let fast = agrees(batch.as_bytes());
        prop_assert!(fast || !plain, "a plain batch left to serde: {}", batch);
    }

    /// Batches cut and spliced anywhere: the fast reader takes only what serde reads the same.
    #[test]
    fn a_broken_batch_gets_serde_s_answer(
        cut in 0usize..520,
        len in 0usize..12,
        splice in prop_oneof![
            Just(String::new()), Just(",".to_string()), Just("}".to_string()), Just("]".to_string()),
            Just("\"".to_string()), Just(" ".to_string()), Just("0".to_string()), Just("-".to_string()),
            Just("null".to_string()), Just(r#""seq":1,"#.to_string()), Just("e5".to_string()), "\\PC{0,6}",
        ],
    ) {
        let mut bytes = batch_of(&[ITEM, &ITEM.replace("\"api\"", "\"b\"")]).into_bytes();
        let at = cut.min(bytes.len());
        let end = (at + len).min(bytes.len());
        bytes.splice(at..end, splice.bytes());
        agrees(&bytes);
    }
}

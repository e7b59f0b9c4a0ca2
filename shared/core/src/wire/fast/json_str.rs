//! JSON strings written byte for byte as serde_json writes them, plain ids copied as they are.

/// A JSON string, byte for byte as serde_json escapes it. Ids are plain ASCII almost always:
/// those are copied between quotes without serde's per-byte escaping.
pub(in crate::wire) fn write_json_str(out: &mut Vec<u8>, s: &str) {
    if is_plain(s.as_bytes()) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, s).expect("a string always serializes");
    }
}

/// Whether `bytes` are all printable ASCII (0x20–0x7f) other than `"` and `\\`: JSON writes them
/// as they are. Eight bytes at a time, without a branch per byte (ids are short, and all plain).
fn is_plain(bytes: &[u8]) -> bool {
    use super::swar::{below, equal, HIGH};
    let bad = |x: u64| (x & HIGH) | below(x, 0x20) | equal(x, b'"') | equal(x, b'\\');
    let mut chunks = bytes.chunks_exact(8);
    let mut found = 0;
    for chunk in &mut chunks {
        found |= bad(u64::from_ne_bytes(chunk.try_into().expect("chunks of 8")));
    }
    let rest = chunks.remainder();
    let mut last = [b'a'; 8];
    last[..rest.len()].copy_from_slice(rest);
    found |= bad(u64::from_ne_bytes(last));
    found == 0
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// The definition, a byte at a time.
    fn plain_bytewise(bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| (0x20..0x80).contains(&b) && b != b'"' && b != b'\\')
    }

    proptest! {
        /// Any bytes, at any length and place in the word: the same answer as byte by byte.
        #[test]
        fn plain_eight_bytes_at_a_time_is_plain_byte_by_byte(
            bytes in proptest::collection::vec(prop_oneof![0x20u8..0x80, any::<u8>(), Just(b'"'), Just(b'\\'), Just(0x7f), Just(0x80)], 0..40),
        ) {
            prop_assert_eq!(super::is_plain(&bytes), plain_bytewise(&bytes));
        }
    }

    #[test]
    fn every_byte_alone_and_in_every_place() {
        super::super::swar::each_byte_in_each_place(|bytes, b, at| {
            let len = bytes.len();
            assert_eq!(super::is_plain(bytes), plain_bytewise(bytes), "byte {b:#x} at {at} of {len}");
        });
    }
}

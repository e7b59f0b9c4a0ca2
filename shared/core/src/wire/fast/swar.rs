//! Eight bytes at a time, without a branch per byte: the scans of ids and strings that a DC
//! manager runs for every item of every batch (100,000 leases written and as many report items
//! read a second at 1,000 limits × 100 pods).

/// `0x01` in every byte.
pub(super) const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
/// `0x80` in every byte.
pub(super) const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);

/// The high bit set in each byte of `x` that is below `n` (`1 ≤ n ≤ 0x80`; bytes of 0x80 and
/// above never are). Exact at the lowest such byte; a byte above one may be set as well (the
/// borrow runs up), so the answer says whether there is one and, read little-endian, where the
/// first is.
pub(super) fn below(x: u64, n: u64) -> u64 {
    x.wrapping_sub(ONES * n) & !x & HIGH
}

/// The high bit set in each byte of `x` equal to `byte` (as exact as [`below`]).
pub(super) fn equal(x: u64, byte: u8) -> u64 {
    below(x ^ (ONES * u64::from(byte)), 1)
}

/// Where the first `"`, `\\` or control character (below 0x20) in `bytes` is: the end of a JSON
/// string without escapes that starts at `bytes[0]`.
pub(super) fn string_end(bytes: &[u8]) -> Option<usize> {
    let special = |x: u64| below(x, 0x20) | equal(x, b'"') | equal(x, b'\\');
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let found = special(u64::from_le_bytes(chunk.try_into().expect("chunks of 8")));
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks.remainder().iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).map(|p| at + p)
}

/// Calls `check(bytes, byte, at)` for every byte value alone at every place `at` of
/// `bytes.len()` = 1 to 17 (`b'a'` elsewhere): each place in a word and in the tail after it.
#[cfg(test)]
pub(super) fn each_byte_in_each_place(mut check: impl FnMut(&mut Vec<u8>, u8, usize)) {
    for b in 0..=255u8 {
        for len in 1..=17 {
            for at in 0..len {
                let mut bytes = vec![b'a'; len];
                bytes[at] = b;
                check(&mut bytes, b, at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// The definition, a byte at a time.
    fn string_end_bytewise(bytes: &[u8]) -> Option<usize> {
        bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20)
    }

    proptest! {
        /// Any bytes, at any length and place in the word: the same answer as byte by byte.
        #[test]
        fn string_end_eight_bytes_at_a_time_is_string_end_byte_by_byte(
            bytes in proptest::collection::vec(
                prop_oneof![0x20u8..0x80, any::<u8>(), Just(b'"'), Just(b'\\'), Just(0x1f), Just(0x20), Just(0x80), Just(0)],
                0..40,
            ),
        ) {
            prop_assert_eq!(super::string_end(&bytes), string_end_bytewise(&bytes));
        }
    }

    #[test]
    fn every_byte_alone_and_in_every_place_and_after_another() {
        super::each_byte_in_each_place(|bytes, b, at| {
            let len = bytes.len();
            assert_eq!(super::string_end(bytes), string_end_bytewise(bytes), "byte {b:#x} at {at} of {len}");
            // A special byte first, then this one: the first is found, whatever follows.
            if at > 0 {
                bytes[at - 1] = 0x01;
                assert_eq!(super::string_end(bytes), Some(at - 1), "0x01 then {b:#x} at {at} of {len}");
            }
        });
    }
}

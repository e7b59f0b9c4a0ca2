//! How a descriptor's path becomes a Leasehold limit id, and how ratelimit matches a value
//! holding `*`.

use leasehold_core::wire::MAX_ID_LEN;
use sha2::{Digest, Sha256};

/// One segment of a limit id: `A–Z a–z 0–9 _ -` as they are, any other byte as `=HH`.
pub(crate) fn id_segment(out: &mut String, text: &str) {
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("={b:02X}"));
        }
    }
}

/// Hex digits of the digest a bounded id ends with (128 bits).
const DIGEST_HEX: usize = 32;

/// A limit id of at most [`MAX_ID_LEN`] bytes: the id itself when it fits; else its first
/// bytes, `~` and the first 128 bits of its SHA-256 in hex. [`id_segment`] never writes `~`, so a
/// bounded id never equals one that fit, and two long ids differ unless their digests do.
pub(crate) fn bounded_id(id: String) -> String {
    if id.len() <= MAX_ID_LEN {
        return id;
    }
    let digest = Sha256::digest(id.as_bytes());
    let keep = MAX_ID_LEN - 1 - DIGEST_HEX;
    // Every byte of an id is ASCII ([`id_segment`]): any cut is a character boundary.
    let mut bounded = String::with_capacity(MAX_ID_LEN);
    bounded.push_str(&id[..keep]);
    bounded.push('~');
    for b in &digest[..DIGEST_HEX / 2] {
        bounded.push_str(&format!("{b:02x}"));
    }
    bounded
}

/// A composite key (`key_value`) holding `*`, split on it, as ratelimit's `wildcardMatch` takes
/// it: the first part must start the text, the last end it, and the ones between follow in
/// order in what is left; a `*` matches any run of characters, none included.
#[derive(Debug)]
pub(crate) struct WildcardPattern {
    parts: Vec<String>,
}

impl WildcardPattern {
    pub(crate) fn new(composite: &str) -> WildcardPattern {
        WildcardPattern { parts: composite.split('*').map(str::to_string).collect() }
    }

    pub(crate) fn matches(&self, text: &str) -> bool {
        let parts = &self.parts;
        let (Some(first), Some(last)) = (parts.first(), parts.last()) else { return false };
        if parts.len() == 1 {
            return first == text;
        }
        let fixed: usize = parts.iter().map(String::len).sum();
        if text.len() < fixed || !text.starts_with(first.as_str()) || !text.ends_with(last.as_str()) {
            return false;
        }
        let mut remaining = &text[first.len()..text.len() - last.len()];
        for part in &parts[1..parts.len() - 1] {
            let Some(at) = remaining.find(part.as_str()) else { return false };
            remaining = &remaining[at + part.len()..];
        }
        true
    }
}

//! A pod's report batch read without serde's machinery, the way `lease_json.rs` writes leases.
//! A DC manager of 1,000 limits reads 100,000 report items a second at 100 pods, and serde's
//! walk (every field name matched as a string, every string copied through its scratch buffer)
//! was a seventh of its time.
//!
//! The reader takes only what it can read exactly as serde does: the batch and each item an
//! object of known keys, each at most once, in any order, with JSON whitespace anywhere between
//! tokens; strings without escapes or control characters; unsigned integers without sign,
//! fraction or exponent. Anything else (an escape, an unknown key, a float where an integer
//! goes, a missing version, broken JSON) is left to serde ([`decode_pod_reports`] falls back),
//! so every batch gets serde's answer: the same value, or the same refusal.

use crate::quota::Quota;
use crate::wire::{
    decode, HeldLease, LeaseVersion, PodReport, PodReports, WireError, WireMessage, MAX_BATCH_ITEMS, PROTOCOL_VERSION,
};

/// [`decode`]`::<PodReports>`, read by [`read_pod_reports`] where it can.
pub fn decode_pod_reports(bytes: &[u8]) -> Result<PodReports, WireError> {
    decode_pod_reports_saying_how(bytes).0
}

/// Which reader decided a report batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportsReadBy {
    /// The reader here (`report_json.rs`).
    Reader,
    /// serde_json: the batch is not of the shape the reader takes (an extra field, an escaped
    /// string, a number written otherwise), or not valid JSON.
    Serde,
}

/// [`decode_pod_reports`], and which reader decided it: a DC manager counts the valid batches
/// serde read, so a pod writing its reports in a shape the reader leaves shows (it costs the
/// manager more per item, and nothing else).
pub fn decode_pod_reports_saying_how(bytes: &[u8]) -> (Result<PodReports, WireError>, ReportsReadBy) {
    if bytes.len() <= PodReports::MAX_BYTES {
        if let Some(batch) = read_pod_reports(bytes) {
            return (batch.validate().map(|()| batch), ReportsReadBy::Reader);
        }
    }
    (decode(bytes), ReportsReadBy::Serde)
}

/// The batch `bytes` hold, or `None` when it is not of the shape read here (serde then decides).
/// A batch read here has `"v"` 2; it is not yet validated.
pub(super) fn read_pod_reports(bytes: &[u8]) -> Option<PodReports> {
    let mut c = Cursor { b: bytes, i: 0 };
    let mut batch = PodReports { v: 0, dc: String::new(), pod: String::new(), reports: Vec::new() };
    let mut v = 0;
    let seen = c.object(&BATCH_KEYS, |c, key| {
        match key {
            0 => v = c.u64()?,
            1 => batch.dc = c.string()?,
            2 => batch.pod = c.string()?,
            _ => batch.reports = c.array(MIN_REPORT_BYTES, read_report)?,
        }
        Some(())
    })?;
    c.end()?;
    (seen == BATCH_KEYS.all() && v == u64::from(PROTOCOL_VERSION))
        .then_some(PodReports { v: PROTOCOL_VERSION, ..batch })
}

/// The shortest report item the reader takes: its required fields, one-byte ids and values, no
/// whitespace (174 bytes), and a comma.
const MIN_REPORT_BYTES: usize = 175;

/// The keys of a batch, a report item and a lease version, in the order serde writes them (the
/// Rust pod's order): [`Cursor::object`] gives each key's place here.
const BATCH_KEYS: Keys<4> = Keys::new([b"v", b"dc", b"pod", b"reports"]);
const REPORT_KEYS: Keys<19> = Keys::new([
    b"v",
    b"limit",
    b"dc",
    b"pod",
    b"incarnation",
    b"seq",
    b"interval_ms",
    b"offered",
    b"admitted",
    b"rejected",
    b"queued",
    b"errors",
    b"upstream_429",
    b"healthy",
    b"draining",
    b"weight",
    b"lease_in_use",
    b"held",
    b"periods",
]);
/// The report keys serde may find missing: `v`, `upstream_429`, `lease_in_use`, `held` and
/// `periods`.
const REPORT_OPTIONAL: u32 = (1 << 0) | (1 << 12) | (1 << 16) | (1 << 17) | (1 << 18);
const LEASE_VERSION_KEYS: Keys<2> = Keys::new([b"epoch", b"seq"]);
const HELD_KEYS: Keys<2> = Keys::new([b"quota", b"left_ms"]);
const QUOTA_KEYS: Keys<2> = Keys::new([b"rate_milli_per_s", b"burst_milli"]);

fn read_report(c: &mut Cursor<'_>) -> Option<PodReport> {
    let mut r = PodReport {
        v: crate::wire::SCHEMA_VERSION,
        limit: String::new(),
        dc: String::new(),
        pod: String::new(),
        incarnation: 0,
        seq: 0,
        interval_ms: 0,
        offered: 0,
        admitted: 0,
        rejected: 0,
        queued: 0,
        errors: 0,
        upstream_429: 0,
        healthy: false,
        draining: false,
        weight: 0.0,
        lease_in_use: None,
        held: None,
        periods: 1,
    };
    // Each arm reads the key at that place in `REPORT_KEYS`.
    let seen = c.object(&REPORT_KEYS, |c, key| {
        match key {
            0 => r.v = u32::try_from(c.u64()?).ok()?,
            1 => r.limit = c.string()?,
            2 => r.dc = c.string()?,
            3 => r.pod = c.string()?,
            4 => r.incarnation = c.u64()?,
            5 => r.seq = c.u64()?,
            6 => r.interval_ms = c.u64()?,
            7 => r.offered = c.u64()?,
            8 => r.admitted = c.u64()?,
            9 => r.rejected = c.u64()?,
            10 => r.queued = c.u64()?,
            11 => r.errors = c.u64()?,
            12 => r.upstream_429 = c.u64()?,
            13 => r.healthy = c.bool()?,
            14 => r.draining = c.bool()?,
            15 => r.weight = c.f64()?,
            16 => r.lease_in_use = c.lease_version_or_null()?,
            17 => r.held = c.held_or_null()?,
            _ => r.periods = u32::try_from(c.u64()?).ok()?,
        }
        Some(())
    })?;
    (seen | REPORT_OPTIONAL == REPORT_KEYS.all()).then_some(r)
}

/// An object's keys (at most 32), each of at most 13 bytes also kept as its quoted form with its
/// colon packed little-endian into a `u128`, so that a key in its usual place is recognized by
/// one comparison of 16 bytes (a longer key is looked up by name).
struct Keys<const N: usize> {
    names: [&'static [u8]; N],
    /// Per key: `"name":` packed, and its length.
    quoted: [(u128, usize); N],
}

impl<const N: usize> Keys<N> {
    const fn new(names: [&'static [u8]; N]) -> Self {
        assert!(N <= 32);
        let mut quoted = [(0, 0); N];
        let mut k = 0;
        while k < N {
            let name = names[k];
            if name.len() > 13 {
                quoted[k] = (0, usize::MAX);
                k += 1;
                continue;
            }
            let len = name.len() + 3;
            let mut word = b'"' as u128 | (b'"' as u128) << (8 * (len - 2)) | (b':' as u128) << (8 * (len - 1));
            let mut i = 0;
            while i < name.len() {
                word |= (name[i] as u128) << (8 * (i + 1));
                i += 1;
            }
            quoted[k] = (word, len);
            k += 1;
        }
        Keys { names, quoted }
    }

    /// Every key's bit.
    const fn all(&self) -> u32 {
        if N == 32 {
            u32::MAX
        } else {
            (1 << N) - 1
        }
    }

    /// Whether `rest` begins with key `k` quoted and its colon.
    fn quoted_at(&self, k: usize, rest: &[u8]) -> Option<usize> {
        let (word, len) = *self.quoted.get(k)?;
        if len > 16 {
            return None;
        }
        let head: &[u8; 16] = rest.get(..16)?.try_into().ok()?;
        let mask = u128::MAX >> (8 * (16 - len));
        (u128::from_le_bytes(*head) & mask == word).then_some(len)
    }

    fn place(&self, name: &[u8]) -> Option<usize> {
        self.names.iter().position(|n| *n == name)
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    /// The next byte after JSON whitespace (not consumed).
    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    /// Nothing but whitespace left.
    fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// `open`, then items read by `each` with `,` between them, then `close` (or `open` `close`
    /// at once: none).
    fn delimited(&mut self, open: u8, close: u8, mut each: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(open)?;
        if self.peek()? == close {
            self.i += 1;
            return Some(());
        }
        loop {
            each(self)?;
            match self.peek()? {
                b',' => self.i += 1,
                b if b == close => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An object of the keys `keys` names, each at most once (serde refuses a key twice): `field`
    /// reads the value of each (given its place in `keys`; the cursor just past its `:`).
    /// Returns the keys seen, a bit each. A key in the place after the last one (as serde writes
    /// them) is recognized by one comparison; any other (another order, whitespace before its
    /// colon, the last 16 bytes) is read as a string and looked up. An unknown key: `None`.
    fn object<const N: usize>(
        &mut self,
        keys: &Keys<N>,
        mut field: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<u32> {
        let (mut next, mut seen) = (0, 0u32);
        self.delimited(b'{', b'}', |c| {
            c.peek()?;
            let key = match keys.quoted_at(next, &c.b[c.i..]) {
                Some(len) => {
                    c.i += len;
                    next
                }
                None => {
                    let name = c.plain()?;
                    c.eat(b':')?;
                    keys.place(name)?
                }
            };
            if seen & (1 << key) != 0 {
                return None;
            }
            seen |= 1 << key;
            next = key + 1;
            field(c, key)
        })?;
        Some(seen)
    }

    /// An array of items at least `min_item_bytes` long each: sized once for as many as the
    /// bytes left could hold, up to [`MAX_BATCH_ITEMS`] (more is refused anyway), where growing
    /// it item by item copied a batch of 1,000 reports ten times over.
    fn array<T>(&mut self, min_item_bytes: usize, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let fits = (self.b.len() - self.i) / min_item_bytes.max(1);
        let mut out = Vec::with_capacity(fits.min(MAX_BATCH_ITEMS));
        self.delimited(b'[', b']', |c| {
            out.push(item(c)?);
            Some(())
        })?;
        Some(out)
    }

    /// A string's bytes, when it has no escape and no control character (valid UTF-8 is checked
    /// by [`Cursor::string`]; keys are compared as bytes).
    fn plain(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let len = super::swar::string_end(&self.b[start..])?;
        self.i = start + len;
        (self.b[self.i] == b'"').then(|| {
            self.i += 1;
            &self.b[start..start + len]
        })
    }

    fn string(&mut self) -> Option<String> {
        std::str::from_utf8(self.plain()?).ok().map(str::to_owned)
    }

    /// An unsigned integer as serde reads one into a `u64`: digits, no leading zero, no
    /// fraction or exponent after them, no overflow. One pass over the digits.
    fn u64(&mut self) -> Option<u64> {
        self.peek()?;
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(&d) = self.b.get(self.i) {
            if !d.is_ascii_digit() {
                break;
            }
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.i += 1;
        }
        let digits = self.i - start;
        if digits == 0 || (digits > 1 && self.b[start] == b'0') {
            return None;
        }
        if matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(n)
    }

    fn bool(&mut self) -> Option<bool> {
        self.peek()?;
        let rest = &self.b[self.i..];
        let (value, len) = if rest.starts_with(b"true") {
            (true, 4)
        } else if rest.starts_with(b"false") {
            (false, 5)
        } else {
            return None;
        };
        self.i += len;
        Some(value)
    }

    /// A number read into an `f64` as serde reads it. The usual weights (`1.0`, `0.25`, `2`:
    /// at most 15 digits, no sign or exponent) are `digits / 10^fraction digits`, one correctly
    /// rounded division of two exact doubles, as serde computes them; anything else is read by
    /// serde itself (its own rounding), from the token alone.
    fn f64(&mut self) -> Option<f64> {
        self.peek()?;
        let len =
            self.b[self.i..].iter().take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')).count();
        let token = &self.b[self.i..self.i + len];
        let value = match plain_decimal(token) {
            Some(value) => value,
            None => serde_json::from_slice::<f64>(token).ok()?,
        };
        self.i += len;
        Some(value)
    }

    fn held_or_null(&mut self) -> Option<Option<HeldLease>> {
        if self.peek()? == b'n' {
            return self.b[self.i..].starts_with(b"null").then(|| {
                self.i += 4;
                None
            });
        }
        let (mut quota, mut left_ms) = (Quota::ZERO, 0);
        let seen = self.object(&HELD_KEYS, |c, key| {
            match key {
                0 => quota = c.quota()?,
                _ => left_ms = c.u64()?,
            }
            Some(())
        })?;
        (seen == HELD_KEYS.all()).then_some(Some(HeldLease { quota, left_ms }))
    }

    fn quota(&mut self) -> Option<Quota> {
        let (mut rate, mut burst) = (0, 0);
        let seen = self.object(&QUOTA_KEYS, |c, key| {
            *(if key == 0 { &mut rate } else { &mut burst }) = c.u64()?;
            Some(())
        })?;
        (seen == QUOTA_KEYS.all()).then_some(Quota::new(rate, burst))
    }

    fn lease_version_or_null(&mut self) -> Option<Option<LeaseVersion>> {
        if self.peek()? == b'n' {
            return self.b[self.i..].starts_with(b"null").then(|| {
                self.i += 4;
                None
            });
        }
        let (mut epoch, mut seq) = (0, 0);
        let seen = self.object(&LEASE_VERSION_KEYS, |c, key| {
            *(if key == 0 { &mut epoch } else { &mut seq }) = c.u64()?;
            Some(())
        })?;
        (seen == LEASE_VERSION_KEYS.all()).then_some(Some(LeaseVersion::new(epoch, seq)))
    }
}

/// `token` as an `f64` when it is digits, no leading zero, then optionally `.` and digits, at
/// most 15 digits in all: their integer (below 2^53, so an exact double) divided by a power of
/// ten (exact up to 10^22). `None` for any other token.
fn plain_decimal(token: &[u8]) -> Option<f64> {
    const POW10: [f64; 16] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];
    let (whole, fraction): (&[u8], &[u8]) = match token.iter().position(|&b| b == b'.') {
        Some(dot) => (&token[..dot], &token[dot + 1..]),
        None => (token, &[]),
    };
    let has_dot = whole.len() < token.len();
    let all_digits = |part: &[u8]| part.iter().all(u8::is_ascii_digit);
    let usual = !whole.is_empty()
        && (whole.len() == 1 || whole[0] != b'0')
        && all_digits(whole)
        && all_digits(fraction)
        && (!has_dot || !fraction.is_empty())
        && whole.len() + fraction.len() <= 15;
    if !usual {
        return None;
    }
    let n = whole.iter().chain(fraction).fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    Some(n as f64 / POW10[fraction.len()])
}

#[cfg(test)]
#[path = "report_json_tests.rs"]
mod tests;

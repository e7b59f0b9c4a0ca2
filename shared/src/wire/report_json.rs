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

use super::{decode, LeaseVersion, PodReport, PodReports, WireError, WireMessage, MAX_BATCH_ITEMS, PROTOCOL_VERSION};

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
    let (mut v, mut dc, mut pod, mut reports) = (None, None, None, None);
    c.object(|c, key| match key {
        b"v" => set(&mut v, c.u64()?),
        b"dc" => set(&mut dc, c.string()?),
        b"pod" => set(&mut pod, c.string()?),
        b"reports" => set(&mut reports, c.array(MIN_REPORT_BYTES, read_report)?),
        _ => None,
    })?;
    c.end()?;
    if v? != u64::from(PROTOCOL_VERSION) {
        return None;
    }
    Some(PodReports { v: PROTOCOL_VERSION, dc: dc?, pod: pod?, reports: reports? })
}

/// The shortest report item the reader takes: its required fields, one-byte ids and values, no
/// whitespace (174 bytes), and a comma.
const MIN_REPORT_BYTES: usize = 175;

fn read_report(c: &mut Cursor<'_>) -> Option<PodReport> {
    let mut f = ReportFields::default();
    c.object(|c, key| match key {
        b"v" => set(&mut f.v, u32::try_from(c.u64()?).ok()?),
        b"limit" => set(&mut f.limit, c.string()?),
        b"dc" => set(&mut f.dc, c.string()?),
        b"pod" => set(&mut f.pod, c.string()?),
        b"incarnation" => set(&mut f.incarnation, c.u64()?),
        b"seq" => set(&mut f.seq, c.u64()?),
        b"interval_ms" => set(&mut f.interval_ms, c.u64()?),
        b"offered" => set(&mut f.offered, c.u64()?),
        b"admitted" => set(&mut f.admitted, c.u64()?),
        b"rejected" => set(&mut f.rejected, c.u64()?),
        b"queued" => set(&mut f.queued, c.u64()?),
        b"errors" => set(&mut f.errors, c.u64()?),
        b"upstream_429" => set(&mut f.upstream_429, c.u64()?),
        b"healthy" => set(&mut f.healthy, c.bool()?),
        b"draining" => set(&mut f.draining, c.bool()?),
        b"weight" => set(&mut f.weight, c.f64()?),
        b"lease_in_use" => set(&mut f.lease_in_use, c.lease_version_or_null()?),
        b"periods" => set(&mut f.periods, u32::try_from(c.u64()?).ok()?),
        _ => None,
    })?;
    Some(PodReport {
        v: f.v.unwrap_or(super::SCHEMA_VERSION),
        limit: f.limit?,
        dc: f.dc?,
        pod: f.pod?,
        incarnation: f.incarnation?,
        seq: f.seq?,
        interval_ms: f.interval_ms?,
        offered: f.offered?,
        admitted: f.admitted?,
        rejected: f.rejected?,
        queued: f.queued?,
        errors: f.errors?,
        upstream_429: f.upstream_429.unwrap_or(0),
        healthy: f.healthy?,
        draining: f.draining?,
        weight: f.weight?,
        lease_in_use: f.lease_in_use.flatten(),
        periods: f.periods.unwrap_or(1),
    })
}

/// A report's fields as read so far (`None`: not seen).
#[derive(Default)]
struct ReportFields {
    v: Option<u32>,
    limit: Option<String>,
    dc: Option<String>,
    pod: Option<String>,
    incarnation: Option<u64>,
    seq: Option<u64>,
    interval_ms: Option<u64>,
    offered: Option<u64>,
    admitted: Option<u64>,
    rejected: Option<u64>,
    queued: Option<u64>,
    errors: Option<u64>,
    upstream_429: Option<u64>,
    healthy: Option<bool>,
    draining: Option<bool>,
    weight: Option<f64>,
    lease_in_use: Option<Option<LeaseVersion>>,
    periods: Option<u32>,
}

/// Stores a field seen for the first time; `None` for a second one (serde refuses duplicates).
fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
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

    /// An object: `field` reads the value of each key (the cursor just past its `:`).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.delimited(b'{', b'}', |c| {
            let key = c.plain()?;
            c.eat(b':')?;
            field(c, key)
        })
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
    /// fraction or exponent after them, no overflow.
    fn u64(&mut self) -> Option<u64> {
        self.peek()?;
        let digits = self.b[self.i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let text = &self.b[self.i..self.i + digits];
        if digits == 0 || (digits > 1 && text[0] == b'0') {
            return None;
        }
        if matches!(self.b.get(self.i + digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let mut n: u64 = 0;
        for &d in text {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        self.i += digits;
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

    /// A number read into an `f64` by serde itself (its own rounding), from the token alone.
    fn f64(&mut self) -> Option<f64> {
        self.peek()?;
        let len =
            self.b[self.i..].iter().take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')).count();
        let value = serde_json::from_slice::<f64>(&self.b[self.i..self.i + len]).ok()?;
        self.i += len;
        Some(value)
    }

    fn lease_version_or_null(&mut self) -> Option<Option<LeaseVersion>> {
        if self.peek()? == b'n' {
            return self.b[self.i..].starts_with(b"null").then(|| {
                self.i += 4;
                None
            });
        }
        let (mut epoch, mut seq) = (None, None);
        self.object(|c, key| match key {
            b"epoch" => set(&mut epoch, c.u64()?),
            b"seq" => set(&mut seq, c.u64()?),
            _ => None,
        })?;
        Some(Some(LeaseVersion::new(epoch?, seq?)))
    }
}

#[cfg(test)]
#[path = "report_json_tests.rs"]
mod tests;

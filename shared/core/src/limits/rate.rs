//! Rates and token amounts as people write them (`"30000/min"`, `burst = 6000`), turned into the
//! exact milli-units of [`crate::quota`] and back.
//!
//! Parsing **rounds down**: `"1000/min"` is 16.666/s (16 666 milli-tokens per second), never
//! 16.667, so a limit written in any unit never grants more than it says. Amounts take at most 3
//! decimals (the milli-unit); more is refused rather than rounded.

use crate::quota::MILLI;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use thiserror::Error;

/// What a rate looks like, quoted in every rate error.
const RATE_FORMS: &str = "write <amount>/<period>, such as \"976/s\", \"30000/min\", \"1000/10s\", \"0.5/s\" \
                          (periods: s, sec, second, m, min, minute, h, hour, d, day, with an optional whole \
                          multiplier such as 10s)";
/// What an amount looks like, quoted in every amount error.
const AMOUNT_FORMS: &str = "write a whole or decimal number with at most 3 decimals, such as 20 or 0.5";

/// Why a rate or an amount as written was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ValueError {
    #[error("{input:?} is not a rate: {RATE_FORMS}")]
    /// The text is not of a rate's form.
    NotARate {
        /// The text given.
        input: String,
    },
    #[error("{input:?}: unknown period {unit:?}: {RATE_FORMS}")]
    /// The rate's period is not a known unit.
    UnknownPeriod {
        /// The text given.
        input: String,
        /// The unit given.
        unit: String,
    },
    #[error("{input:?}: the period is zero: {RATE_FORMS}")]
    /// The rate's period is zero.
    ZeroPeriod {
        /// The text given.
        input: String,
    },
    #[error("{input:?} is not an amount ({reason}): {AMOUNT_FORMS}")]
    /// The text is not an amount.
    NotAnAmount {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    #[error("{input:?} is not a rate (its amount: {reason}): {RATE_FORMS}")]
    /// The rate's amount is not an amount.
    RateAmount {
        /// The text given.
        input: String,
        /// What is wrong with the amount.
        reason: &'static str,
    },
    #[error("{input:?} is too large (at most {} per second or tokens)", u64::MAX / MILLI)]
    /// The value does not fit in milli-units.
    TooLarge {
        /// The text given.
        input: String,
    },
}

/// `"20"`, `"0.5"`, `" 6000 "` → milli-tokens. At most 3 decimals, no sign, no exponent.
pub fn parse_amount(input: &str) -> Result<u64, ValueError> {
    let bad = |reason| ValueError::NotAnAmount { input: input.into(), reason };
    let text = input.trim();
    let (whole, fraction) = match text.split_once('.') {
        Some((w, f)) => (w, f),
        None => (text, ""),
    };
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad("no digits"));
    }
    if !whole.chars().chain(fraction.chars()).all(|c| c.is_ascii_digit()) {
        return Err(bad("only digits and one decimal point are allowed"));
    }
    if text.contains('.') && fraction.is_empty() {
        return Err(bad("no digits after the decimal point"));
    }
    if fraction.len() > 3 {
        return Err(bad("more than 3 decimals"));
    }
    let too_large = || ValueError::TooLarge { input: input.into() };
    let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
    let fraction_milli: u64 = format!("{fraction:0<3}").parse().map_err(|_| bad("bad decimals"))?;
    whole.checked_mul(MILLI).and_then(|m| m.checked_add(fraction_milli)).ok_or_else(too_large)
}

/// `"976/s"`, `"30000/min"`, `"1000/10s"` → milli-tokens per second, rounded down.
pub fn parse_rate(input: &str) -> Result<u64, ValueError> {
    let not_a_rate = || ValueError::NotARate { input: input.into() };
    let (amount, period) = input.split_once('/').ok_or_else(not_a_rate)?;
    let amount_milli = parse_amount(amount).map_err(|e| match e {
        ValueError::NotAnAmount { reason, .. } => ValueError::RateAmount { input: input.into(), reason },
        _ => ValueError::TooLarge { input: input.into() },
    })?;
    let period = period.trim();
    let digits = period.len() - period.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (multiplier, unit) = period.split_at(digits);
    let multiplier: u64 = if multiplier.is_empty() {
        1
    } else {
        multiplier.parse().map_err(|_| ValueError::TooLarge { input: input.into() })?
    };
    let unit = unit.trim();
    let unit_s = match unit {
        "s" | "sec" | "second" | "seconds" => 1,
        "m" | "min" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        "" => return Err(not_a_rate()),
        other => return Err(ValueError::UnknownPeriod { input: input.into(), unit: other.into() }),
    };
    let period_s = multiplier.checked_mul(unit_s).ok_or_else(|| ValueError::TooLarge { input: input.into() })?;
    if period_s == 0 {
        return Err(ValueError::ZeroPeriod { input: input.into() });
    }
    Ok(amount_milli / period_s)
}

/// Milli-tokens as a decimal with the trailing zeros dropped: 20 000 → `"20"`, 500 → `"0.5"`.
pub fn format_amount(milli: u64) -> String {
    let (whole, fraction) = (milli / MILLI, milli % MILLI);
    if fraction == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{}", format!("{fraction:03}").trim_end_matches('0'))
    }
}

/// Milli-tokens per second in the form [`parse_rate`] reads back exactly: 976 000 → `"976/s"`,
/// 16 666 → `"16.666/s"`.
pub fn format_rate(milli_per_s: u64) -> String {
    format!("{}/s", format_amount(milli_per_s))
}

/// A rate as written (kept, so a stored definition reads the way its author wrote it) and its
/// exact value. Two rates are equal when their values are (`"60/min"` equals `"1/s"`).
#[derive(Clone, Debug)]
pub struct Rate {
    text: String,
    milli_per_s: u64,
}

impl Rate {
    /// Parses a rate as written (such as `"976/s"`).
    pub fn parse(text: &str) -> Result<Rate, ValueError> {
        Ok(Rate { milli_per_s: parse_rate(text)?, text: text.trim().to_string() })
    }

    /// The exact value, written per second.
    pub fn from_milli_per_s(milli_per_s: u64) -> Rate {
        Rate { text: format_rate(milli_per_s), milli_per_s }
    }

    /// The exact value, in milli-units per second.
    pub fn milli_per_s(&self) -> u64 {
        self.milli_per_s
    }

    /// As its author wrote it.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl Default for Rate {
    fn default() -> Self {
        Rate::from_milli_per_s(0)
    }
}

impl PartialEq for Rate {
    fn eq(&self, other: &Self) -> bool {
        self.milli_per_s == other.milli_per_s
    }
}

impl Eq for Rate {}

/// The exact value per second (`"1000/min"` shows as `16.666/s`).
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_rate(self.milli_per_s))
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RateVisitor;
        impl Visitor<'_> for RateVisitor {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a rate as a string, such as \"976/s\" or \"30000/min\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Rate, E> {
                Rate::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_str(RateVisitor)
    }
}

/// A number of tokens, exact to the milli-token. Written as a number (`20`, `0.5`) or a string
/// (`"20"`); stored as a whole number when it is one, else as a string (`"16.666"`), so no
/// binary fraction ever stands for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    /// The number, in milli-tokens.
    pub milli: u64,
}

impl Tokens {
    /// Parses an amount as written (such as `"20"` or `"0.5"`).
    pub fn parse(text: &str) -> Result<Tokens, ValueError> {
        parse_amount(text).map(|milli| Tokens { milli })
    }
}

impl fmt::Display for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_amount(self.milli))
    }
}

impl Serialize for Tokens {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.milli.is_multiple_of(MILLI) {
            s.serialize_u64(self.milli / MILLI)
        } else {
            s.serialize_str(&format_amount(self.milli))
        }
    }
}

impl<'de> Deserialize<'de> for Tokens {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TokensVisitor;
        impl Visitor<'_> for TokensVisitor {
            type Value = Tokens;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a number of tokens, such as 20, 0.5 or \"20\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tokens, E> {
                Tokens::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tokens, E> {
                Tokens::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Tokens, E> {
                // Rust prints the shortest text that reads back as the same f64: 0.1 → "0.1".
                Tokens::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Tokens, E> {
                Tokens::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(TokensVisitor)
    }
}

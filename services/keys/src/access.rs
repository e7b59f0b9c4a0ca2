//! Who decides what, over HTTP: a key's tier and the admin endpoints (docs/PROTOCOL.md, "Trust").
//!
//! * **The tier** is the operator's decision by default: the tiers document's override,
//!   assignment or `default_tier`. A request naming a tier (`?tier=`, `"tier"`) is refused with
//!   `400` unless `caller_tier` is on (every caller is trusted to choose). With `tier_header`
//!   set, the tier is taken from that header, which a trusted gateway in front of the limiter
//!   sets after authenticating the caller (and must strip from the client's own request).
//! * **The admin endpoints** (`GET`/`PUT /v1/tiers`, `GET /v1/hot`) need
//!   `Authorization: Bearer <admin_token>`, compared in constant time; without a configured
//!   token they are refused (`403`), never open.
//!
//! Between instances the tier travels in the forwarded [`crate::KeyCheck`], decided by the
//! instance that took the HTTP request; the owner trusts it, because only keys instances may
//! publish on `lh.keys.check.*` (NATS permissions).

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use leasehold_process::problem::problem;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

/// Shortest admin token accepted at start.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;

/// The bearer token of the admin endpoints. Never printed: `Debug` shows `***`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AdminToken(String);

impl AdminToken {
    /// A token of at least [`MIN_ADMIN_TOKEN_CHARS`] visible ASCII characters (what a bearer
    /// header can carry), or why not (without the token).
    pub fn new(token: String) -> Result<Self, BadAdminToken> {
        let token = AdminToken(token);
        token.check()?;
        Ok(token)
    }

    /// Whether it is one [`AdminToken::new`] would take (a deserialized one is checked here).
    pub fn check(&self) -> Result<(), BadAdminToken> {
        if self.0.chars().count() < MIN_ADMIN_TOKEN_CHARS {
            return Err(BadAdminToken::TooShort);
        }
        if !self.0.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(BadAdminToken::NotVisibleAscii);
        }
        Ok(())
    }

    /// Constant time in the presented token's bytes (a length difference is not hidden).
    fn matches(&self, presented: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(presented).into()
    }
}

/// Why a token cannot be the admin token (it is never part of the message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadAdminToken {
    #[error("admin_token must be at least {MIN_ADMIN_TOKEN_CHARS} characters")]
    TooShort,
    #[error("admin_token must be visible ASCII characters (no spaces)")]
    NotVisibleAscii,
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

/// What the HTTP API trusts callers with. The default trusts them with nothing: the operator's
/// tiers decide, and the admin endpoints are off.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    /// Callers may name their tier (`?tier=`, `"tier"`).
    pub caller_tier: bool,
    /// The tier comes from this header, set by a trusted gateway (which must strip it from
    /// client requests); it wins over a tier the caller named.
    pub tier_header: Option<HeaderName>,
    /// The admin endpoints' bearer token; none: they are refused.
    pub admin_token: Option<AdminToken>,
}

impl Trust {
    /// The tier a request is decided under, from the gateway's header (`gateway`) and the tier
    /// the caller named; `None`: the tiers document's (override, assignment, default).
    /// `gateway` holds every value of the header: more than one is refused (a gateway that
    /// appends instead of replacing would let the client's value through).
    pub fn tier(&self, gateway: &[HeaderValue], named: Option<String>) -> Result<Option<String>, Refused> {
        if let Some(t) = named.as_ref().filter(|_| !self.caller_tier) {
            let source = match &self.tier_header {
                Some(h) => format!("the {h} header a trusted gateway sets, else the tiers document"),
                None => "the tiers document (overrides, assignments, default_tier)".into(),
            };
            return Err(Refused::TierNamed(format!(
                "the tier is the operator's decision here, not the caller's: remove tier {t:?} from the \
                 request; the key's tier comes from {source}. To let every caller choose its tier, the \
                 operator sets caller_tier = true (LEASEHOLD_KEYS_CALLER_TIER=true or --caller-tier)"
            )));
        }
        match (&self.tier_header, gateway) {
            (Some(name), [_, _, ..]) => Err(Refused::BadTierHeader(format!(
                "the {name} header appears more than once; the gateway must set it once, replacing any the client sent"
            ))),
            (Some(name), [v]) => match v.to_str() {
                Ok(tier) => Ok(Some(tier.to_string())),
                Err(_) => Err(Refused::BadTierHeader(format!("the {name} header is not a tier name (visible ASCII)"))),
            },
            _ => Ok(named),
        }
    }

    /// `Ok` if the request carries the admin token.
    pub fn authorize_admin(&self, headers: &HeaderMap) -> Result<(), Refused> {
        let Some(token) = &self.admin_token else { return Err(Refused::AdminOff) };
        match headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()).and_then(bearer) {
            Some(p) if token.matches(p) => Ok(()),
            Some(_) => Err(Refused::WrongToken),
            None => Err(Refused::NoToken),
        }
    }
}

/// Why [`Trust`] refused a request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    /// 400: the caller named a tier, and callers may not.
    #[error("{0}")]
    TierNamed(String),
    /// 400: the gateway's tier header is not text.
    #[error("{0}")]
    BadTierHeader(String),
    /// 403: no admin token is configured.
    #[error(
        "admin endpoints are off: no admin_token is configured. Set admin_token in the settings file or \
         LEASEHOLD_KEYS_ADMIN_TOKEN (at least {MIN_ADMIN_TOKEN_CHARS} characters) and send \
         Authorization: Bearer <token>"
    )]
    AdminOff,
    /// 401: no `Authorization: Bearer` credentials.
    #[error("this endpoint needs Authorization: Bearer <admin_token>")]
    NoToken,
    /// 401: credentials that are not the admin token.
    #[error("the bearer token is not the admin token")]
    WrongToken,
}

impl Refused {
    /// The `application/problem+json` answer (with a `WWW-Authenticate` challenge on a 401).
    pub fn respond(&self) -> Response {
        let (status, title, challenge) = match self {
            Refused::TierNamed(_) => (StatusCode::BAD_REQUEST, "tier not accepted", None),
            Refused::BadTierHeader(_) => (StatusCode::BAD_REQUEST, "invalid request", None),
            Refused::AdminOff => (StatusCode::FORBIDDEN, "admin endpoints off", None),
            Refused::NoToken => (StatusCode::UNAUTHORIZED, "admin token needed", Some("Bearer")),
            Refused::WrongToken => {
                (StatusCode::UNAUTHORIZED, "admin token needed", Some("Bearer error=\"invalid_token\""))
            }
        };
        let mut r = problem(status, title, self.to_string());
        if let Some(c) = challenge {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
        }
        r
    }
}

/// The credentials of `Bearer <token>` (the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then(|| rest.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_never_printed_and_short_ones_are_refused() {
        let t = AdminToken::new("s3cret-s3cret-s3cret".into()).unwrap();
        assert_eq!(format!("{t:?}"), "AdminToken(***)");
        assert_eq!(format!("{:?}", Trust { admin_token: Some(t), ..Trust::default() }).matches("s3cret").count(), 0);
        let err = AdminToken::new("short".into()).unwrap_err().to_string();
        assert!(err.contains("16") && !err.contains("short"), "{err}");
        assert!(AdminToken::new("sixteen chars ok".into()).is_err(), "a space");
    }

    #[test]
    fn bearer_credentials_are_read_from_any_case_of_the_scheme() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bear"), None);
    }
}

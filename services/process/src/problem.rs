//! `application/problem+json` answers (RFC 9457) for the services' HTTP APIs.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

pub const CONTENT_TYPE: &str = "application/problem+json";

/// A problem's body; `extra` adds fields of the caller's own (flattened).
#[derive(Serialize)]
pub struct Problem<'a, T: Serialize = ()> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub title: &'a str,
    pub status: u16,
    pub detail: String,
    #[serde(flatten)]
    pub extra: T,
}

impl<'a, T: Serialize> Problem<'a, T> {
    pub fn new(status: StatusCode, title: &'a str, detail: String, extra: T) -> Self {
        Problem { kind: "about:blank", title, status: status.as_u16(), detail, extra }
    }

    /// The answer: `status`, the problem content type, this body.
    pub fn respond(&self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_string(self).unwrap_or_default();
        (status, [(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response()
    }
}

/// A problem with no fields of its own.
pub fn problem(status: StatusCode, title: &str, detail: String) -> Response {
    Problem::new(status, title, detail, ()).respond()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_has_the_rfc_fields_and_the_callers_own() {
        #[derive(Serialize)]
        struct Extra {
            key: &'static str,
        }
        let p = Problem::new(StatusCode::TOO_MANY_REQUESTS, "rate limited", "over".into(), Extra { key: "k" });
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "about:blank", "title": "rate limited", "status": 429, "detail": "over", "key": "k"})
        );
        assert_eq!(problem(StatusCode::BAD_REQUEST, "bad", "x".into()).status(), 400);
    }
}

//! `/readyz` answers: 200 with the readiness as JSON when ready, 503 with it when not (what
//! Kubernetes' readiness probes and a rolling upgrade wait for). The rules are the core's
//! ([`leasehold_core::readiness`]).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use leasehold_core::readiness::Readiness;

/// The HTTP answer for `readiness`.
pub fn answer(readiness: Readiness) -> Response {
    let code = if readiness.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(readiness)).into_response()
}

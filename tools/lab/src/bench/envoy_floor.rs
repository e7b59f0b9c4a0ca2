//! The least any RLS server can add: a `ShouldRateLimit` server that answers every call `OK`
//! with nothing else, deciding nothing. `bench envoy` runs it as a process of its own (the hidden
//! `bench envoy-floor-rls`), on one thread as the agent and the Redis design's server are; what
//! Envoy's latency gains with it is Envoy's own gRPC call and the hop, which no server can take
//! away, and so the floor under both designs' added latency on this machine.

use super::envoy_servers::serve_rls_on_one_thread;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Where to serve `ShouldRateLimit` (port 0: one the kernel picks, printed as
    /// `listening on ADDR`).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
}

/// Answer every call `OK` until killed.
pub(super) fn serve(a: ServeArgs) -> Result<ExitCode, String> {
    serve_rls_on_one_thread("the floor RLS", &a.listen, async { Ok(RateLimitServiceServer::new(AlwaysOk)) })
}

struct AlwaysOk;

#[tonic::async_trait]
impl RateLimitService for AlwaysOk {
    async fn should_rate_limit(
        &self,
        _request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse { overall_code: Code::Ok as i32, ..Default::default() }))
    }
}

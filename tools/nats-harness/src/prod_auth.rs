//! The shipped roles and permissions (`nats/prod/roles.toml`) as production runs them: NATS's
//! JWT auth made by `leasehold_nats::auth::setup` into a temporary directory (removed on drop),
//! so permission and topology tests run servers with exactly what production gets, and connect
//! as each role with its own credential.

use crate::{NatsServer, ServerError};
use leasehold_nats::auth;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// `nats/prod/roles.toml`, as shipped.
pub const ROLES_TOML: &str = include_str!("../../../nats/prod/roles.toml");

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Credentials for the shipped roles and DCs: the operator's keys, the resolver config every
/// server includes, the standing users' `.creds` and pods' credentials issued on demand.
pub struct ProdAuth {
    dir: PathBuf,
    resolver_conf: String,
    leaf_account_conf: String,
}

impl ProdAuth {
    /// `leasehold auth setup` for `dcs` with the shipped roles.
    pub fn new(dcs: &[&str]) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-auth-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let dcs: Vec<String> = dcs.iter().map(|d| d.to_string()).collect();
        let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let report = auth::setup(&dir, ROLES_TOML, &dcs, now_s).map_err(|e| e.to_string())?;
        let resolver_conf = std::fs::read_to_string(&report.resolver_conf).map_err(|e| e.to_string())?;
        let leaf_account_conf = std::fs::read_to_string(dir.join("leaf-account.conf")).map_err(|e| e.to_string())?;
        Ok(Self { dir, resolver_conf, leaf_account_conf })
    }

    /// The generated `resolver.conf`, for a server's files.
    pub fn resolver_conf(&self) -> &str {
        &self.resolver_conf
    }

    /// The generated `leaf-account.conf` (a DC server's files).
    pub fn leaf_account_conf(&self) -> &str {
        &self.leaf_account_conf
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `.creds` of `user`: a standing role (`coordinator`, `dc-bkk`, `inspect`, …), or a pod
    /// id `<dc>-…` (issued as `pod-<dc>` the first time it is asked for).
    pub fn creds(&self, user: &str) -> PathBuf {
        let standing = self.dir.join("creds").join(format!("{user}.creds"));
        if standing.exists() {
            return standing;
        }
        let dc = user.split('-').next().unwrap_or(user);
        self.issue(&format!("pod-{dc}"), user).unwrap_or_else(|e| panic!("{user}: {e}"))
    }

    /// A new user `name` of the per-user role `role`: its `.creds` file.
    pub fn issue(&self, role: &str, name: &str) -> Result<PathBuf, String> {
        let path = self.dir.join(format!("issued-{role}-{name}.creds"));
        if !path.exists() {
            let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let creds = auth::issue(&self.dir, role, name, now_s).map_err(|e| e.to_string())?;
            std::fs::write(&path, creds).map_err(|e| e.to_string())?;
        }
        Ok(path)
    }

    /// `leasehold auth revoke` of the credential at `creds`: the new `resolver.conf`.
    pub fn revoke(&self, creds: &Path) -> Result<String, String> {
        let user = auth::read_creds_file(creds).map_err(|e| e.to_string())?;
        let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let resolver =
            auth::revoke(&self.dir, &user.public_key, now_s.max(user.issued_at_s), now_s).map_err(|e| e.to_string())?;
        std::fs::read_to_string(resolver).map_err(|e| e.to_string())
    }

    /// A client of `url` as `user` ([`creds`](Self::creds)), within the usual deadline.
    pub async fn client(&self, url: &str, user: &str) -> async_nats::Client {
        crate::wait::client_with_creds(url, Some(&self.creds(user)), user).await
    }
}

impl Drop for ProdAuth {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server (JetStream on) with the shipped roles for DCs `bkk` and `europe`.
pub fn start(binary: &Path) -> Result<(NatsServer, ProdAuth), ServerError> {
    let auth =
        ProdAuth::new(&["bkk", "europe"]).map_err(|reason| ServerError::Spawn { binary: "auth".into(), reason })?;
    let files = [("server.conf", "include ./resolver.conf\n"), ("resolver.conf", auth.resolver_conf())];
    let server = NatsServer::start_with_config(binary, &files, &[])?;
    Ok((server, auth))
}

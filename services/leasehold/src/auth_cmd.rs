//! `leasehold auth`: the production topology's credentials (NATS JWTs, `leasehold_nats::auth`).
//!
//! * `setup --roles nats/prod/roles.toml --dc bkk --dc europe --dir nats/prod/auth`: the operator
//!   step. Creates the keys once, writes `DIR/resolver.conf` (every server includes it) and the
//!   standing roles' `.creds`; run it again after changing the roles (keys are kept) and reload
//!   the servers.
//! * `issue --dir DIR --role pod-bkk --name <pod id> [--out FILE]`: one pod's credential (its
//!   permissions follow from its name; no server change).
//! * `revoke --dir DIR --creds FILE` (or `--user U…`): the account signed again with the
//!   revocation; the servers apply it on reload.

use clap::{Args, Subcommand};
use leasehold_nats::auth;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct AuthArgs {
    #[command(subcommand)]
    command: AuthCommand,
}

#[derive(Subcommand)]
enum AuthCommand {
    /// Create the operator's and roles' keys (kept if present), write DIR/resolver.conf and the
    /// standing roles' credentials.
    Setup {
        /// The roles and their permissions.
        #[arg(long, default_value = "nats/prod/roles.toml")]
        roles: PathBuf,
        /// A DC (repeat for each): per-DC roles get one key each (`dc-<dc>`, `pod-<dc>`, …).
        #[arg(long = "dc", required = true)]
        dcs: Vec<String>,
        /// Where the keys (secret), resolver.conf and .creds files go.
        #[arg(long, default_value = "nats/prod/auth")]
        dir: PathBuf,
    },
    /// Issue a credential for one user of a per-user role (a pod: `--role pod-<dc> --name <pod
    /// id>`), with the role's key from DIR, or from `--key` and `--account` alone.
    Issue {
        #[arg(long, default_value = "nats/prod/auth", conflicts_with = "key")]
        dir: PathBuf,
        #[arg(long)]
        role: String,
        /// The role's key (DIR/keys/role-<role>.nk), instead of --dir.
        #[arg(long, requires = "account")]
        key: Option<PathBuf>,
        /// The account's public key file (DIR/account.pub), with --key.
        #[arg(long, requires = "key")]
        account: Option<PathBuf>,
        /// The user's name: a pod's id (letters, digits, '-', '_').
        #[arg(long)]
        name: String,
        /// Write the .creds here (owner-only, replacing what is there); without it, print it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Revoke one user's credential (e.g. a pod's): the account is signed again with the
    /// revocation into DIR/resolver.conf; reload the servers (`nats-server --signal reload`) and
    /// they refuse it and close its connections.
    Revoke {
        #[arg(long, default_value = "nats/prod/auth")]
        dir: PathBuf,
        /// The credential to revoke (its user key is read from it).
        #[arg(long, required_unless_present = "user", conflicts_with = "user")]
        creds: Option<PathBuf>,
        /// Or the user's public key (U…), e.g. from the server's connection list.
        #[arg(long)]
        user: Option<String>,
    },
}

/// A credential's issue time (`iat`), and a revocation's: nats-server refuses a revoked user's
/// credentials issued at or before the revocation's time.
fn now_s() -> u64 {
    leasehold_process::clock::wall_ms() / 1_000
}

pub fn run(args: AuthArgs) -> Result<ExitCode, crate::CommandError> {
    match args.command {
        AuthCommand::Setup { roles, dcs, dir } => {
            let toml = std::fs::read_to_string(&roles).map_err(|e| format!("{}: {e}", roles.display()))?;
            let report = auth::setup(&dir, &toml, &dcs, now_s())?;
            println!("account {}: {}", auth::ACCOUNT_NAME, report.account_public_key);
            println!("include in every server: {}", report.resolver_conf.display());
            for creds in &report.creds {
                println!("credentials: {}", creds.display());
            }
            for role in &report.issued_roles {
                println!("issue one per user: leasehold auth issue --dir {} --role {role} --name <id>", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        AuthCommand::Revoke { dir, creds, user } => {
            let now = now_s();
            let (key, at, who) = match (creds, user) {
                (Some(path), _) => {
                    let c = auth::read_creds_file(&path)?;
                    // Issued at or before: the issuer's clock may be ahead of this one.
                    (c.public_key, now.max(c.issued_at_s), c.name)
                }
                (None, Some(user)) => (user.clone(), now, user),
                (None, None) => return Err("give --creds or --user".into()),
            };
            let resolver = auth::revoke(&dir, &key, at, now)?;
            println!("revoked {who} ({key}); reload every server to apply {}", resolver.display());
            Ok(ExitCode::SUCCESS)
        }
        AuthCommand::Issue { dir, role, key, account, name, out } => {
            let creds = match (key, account) {
                (Some(key), Some(account)) => auth::issue_with_key(&key, &account, &role, &name, now_s()),
                _ => auth::issue(&dir, &role, &name, now_s()),
            };
            let creds = creds?;
            match out {
                None => print!("{creds}"),
                Some(path) => auth::write_file(&path, &creds, true)?,
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

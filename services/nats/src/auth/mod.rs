//! Credentials for the production topology: NATS's decentralized (JWT) auth, generated from a
//! roles file (`nats/prod/roles.toml`).
//!
//! One operator, a system account and the `LEASEHOLD` account. Each role (per DC for the roles
//! marked `per_dc`) is a scoped signing key of the account whose template holds the role's
//! permissions, so a user carries only its name: a pod's user is named after its pod id, and the
//! pod role's template (`lh.pod.<dc>.{{name()}}.report`, …) confines it to its own subjects.
//! Issuing a pod's credential ([`issue`]) needs no server change and no reload.
//!
//! [`setup`] creates the keys once (kept in `DIR/keys/`, never rewritten) and writes, every time
//! it runs, the account JWT from the roles file, `DIR/resolver.conf` (every server includes it),
//! `DIR/leaf-account.conf` (a DC's servers include it too) and a `.creds` file for every role
//! that has one standing user (`DIR/creds/<role>.creds`).

mod creds;
mod files;
pub mod jwt;

pub use creds::{issue, issue_with_key, read_creds, read_creds_file, CredsUser};
pub use files::write_file;

use files::{file_error, key, private_dir};
use jwt::{Responses, UserTemplate};
use nkeys::KeyPair;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The account every Leasehold role belongs to.
pub const ACCOUNT_NAME: &str = "LEASEHOLD";
/// The variable `leaf-account.conf` defines to the `LEASEHOLD` account's public key: a DC
/// server includes it and binds its leaf-node remote to it (`account: $LEASEHOLD_ACCOUNT`).
/// nats-server refuses a variable nothing uses, so it is not in `resolver.conf`.
pub const ACCOUNT_VARIABLE: &str = "LEASEHOLD_ACCOUNT";
/// The connection types a role may be limited to (nats-server's names).
const CONNECTION_TYPES: [&str; 6] = ["STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS"];

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("roles file: {0}")]
    Roles(String),
    #[error("{0:?} is not a usable name: letters, digits, '-' and '_' only, 1 to 64 of them")]
    BadName(String),
    #[error("no role {role:?} in {dir} (roles there: {known})")]
    UnknownRole { role: String, dir: PathBuf, known: String },
    #[error("role {0:?} has one standing user (its .creds is written by setup); issue only per-user roles")]
    StandingRole(String),
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("not a NATS credentials file: {0}")]
    Creds(String),
    #[error(transparent)]
    Jwt(#[from] jwt::JwtError),
}

/// One role of the roles file. `{dc}` in a subject is the DC's name (a `per_dc` role becomes
/// `<role>-<dc>` for every DC); `{{name()}}` is the user's name, filled in by nats-server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleSpec {
    #[serde(default)]
    per_dc: bool,
    /// `true`: one user, whose `.creds` setup writes; `false`: users issued one by one.
    #[serde(default = "yes")]
    one_user: bool,
    /// Both lists are required and never empty: nats-server reads a missing list as "allow
    /// everything".
    publish: Vec<String>,
    subscribe: Vec<String>,
    /// May answer requests (publish to the reply subject of one request it received).
    #[serde(default)]
    allow_responses: bool,
    /// Only these kinds of connection (e.g. `["LEAFNODE"]`). Such a role's user is signed by the
    /// account's own key with its permissions in its JWT (nats-server applies no connection
    /// types from a scoped key's template), so it has one standing user.
    #[serde(default)]
    connection_types: Vec<String>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RolesFile {
    roles: BTreeMap<String, RoleSpec>,
}

/// A role with its DC filled in.
#[derive(Debug)]
pub struct Role {
    pub name: String,
    pub one_user: bool,
    pub template: UserTemplate,
    /// Not empty: no scoped key; one user signed by the account with these connection types.
    pub connection_types: Vec<String>,
}

/// `name` may be a subject token and a file name.
pub fn check_name(name: &str) -> Result<(), AuthError> {
    let ok = (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(AuthError::BadName(name.to_string()))
    }
}

fn check_spec(name: &str, spec: &RoleSpec) -> Result<(), AuthError> {
    let bad = |why: String| Err(AuthError::Roles(format!("role {name:?}: {why}")));
    if spec.publish.is_empty() || spec.subscribe.is_empty() {
        return bad("publish and subscribe must each list at least one subject (NATS reads none as all)".into());
    }
    if !spec.per_dc && spec.publish.iter().chain(&spec.subscribe).any(|s| s.contains("{dc}")) {
        return bad("names {dc} but is not per_dc".into());
    }
    if let Some(t) = spec.connection_types.iter().find(|t| !CONNECTION_TYPES.contains(&t.as_str())) {
        return bad(format!("unknown connection type {t:?} (known: {})", CONNECTION_TYPES.join(", ")));
    }
    if !spec.connection_types.is_empty() && !spec.one_user {
        return bad("a role with connection_types has one standing user (one_user = true)".into());
    }
    Ok(())
}

/// The roles of `roles_toml` for `dcs`.
pub fn roles(roles_toml: &str, dcs: &[String]) -> Result<Vec<Role>, AuthError> {
    let file: RolesFile = toml::from_str(roles_toml).map_err(|e| AuthError::Roles(e.to_string()))?;
    for dc in dcs {
        check_name(dc)?;
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, spec) in &file.roles {
        check_name(name)?;
        check_spec(name, spec)?;
        let instances: Vec<(String, &str)> = if spec.per_dc {
            dcs.iter().map(|dc| (format!("{name}-{dc}"), dc.as_str())).collect()
        } else {
            vec![(name.clone(), "")]
        };
        for (role, dc) in instances {
            if !seen.insert(role.clone()) {
                // Two templates under one key: nats-server would keep only one.
                return Err(AuthError::Roles(format!("role {role:?} twice (a DC given twice, or a name clash)")));
            }
            let fill = |subjects: &[String]| subjects.iter().map(|s| s.replace("{dc}", dc)).collect();
            let resp = spec.allow_responses.then_some(Responses { max: 1, ttl: 0 });
            let template = UserTemplate::new(fill(&spec.publish), fill(&spec.subscribe), resp);
            let connection_types = spec.connection_types.clone();
            out.push(Role { name: role, one_user: spec.one_user, template, connection_types });
        }
    }
    Ok(out)
}

/// What [`setup`] wrote.
#[derive(Debug)]
pub struct SetupReport {
    pub resolver_conf: PathBuf,
    pub account_public_key: String,
    /// `.creds` files of the standing users.
    pub creds: Vec<PathBuf>,
    /// Roles whose users are issued one by one ([`issue`]).
    pub issued_roles: Vec<String>,
}

/// Create (or keep) the keys in `dir` and write the resolver config and the standing users'
/// credentials for `roles_toml` and `dcs` (kept in `dir` too, for [`revoke`] to sign the account
/// again with the same roles).
pub fn setup(dir: &Path, roles_toml: &str, dcs: &[String], now_s: u64) -> Result<SetupReport, AuthError> {
    let roles = roles(roles_toml, dcs)?;
    std::fs::create_dir_all(dir).map_err(|e| file_error(dir, e))?;
    private_dir(&dir.join("keys"))?;
    private_dir(&dir.join("creds"))?;
    write_file(&dir.join(ROLES_COPY), roles_toml, false)?;
    let dcs_toml = toml::to_string(&SetupDcs { dcs: dcs.to_vec() }).map_err(|e| AuthError::Roles(e.to_string()))?;
    write_file(&dir.join(DCS_COPY), &dcs_toml, false)?;
    let signed = sign_account(dir, &roles, now_s)?;
    let (account, role_keys) = (signed.account, signed.role_keys);
    let resolver_conf = dir.join("resolver.conf");

    let mut creds = Vec::new();
    let mut issued_roles = Vec::new();
    for role in &roles {
        if !role.one_user {
            issued_roles.push(role.name.clone());
            continue;
        }
        let text = match role_keys.get(&role.name) {
            Some(k) => creds::scoped_creds(k, &account.public_key(), &role.name, &role.name, now_s)?,
            None => {
                let user = KeyPair::new_user();
                let token =
                    jwt::account_user(&account, &user, &role.name, &role.template, &role.connection_types, now_s)?;
                jwt::creds_file(&token, &user)?
            }
        };
        let path = dir.join("creds").join(format!("{}.creds", role.name));
        write_file(&path, &text, true)?;
        creds.push(path);
    }
    Ok(SetupReport { resolver_conf, account_public_key: account.public_key(), creds, issued_roles })
}

/// What [`setup`] keeps of its inputs, for [`revoke`].
const ROLES_COPY: &str = "setup-roles.toml";
const DCS_COPY: &str = "setup-dcs.toml";
const REVOCATIONS: &str = "revocations.json";

#[derive(serde::Serialize, Deserialize)]
struct SetupDcs {
    dcs: Vec<String>,
}

struct Signed {
    account: KeyPair,
    /// The scoped roles' keys, by role (roles with connection types have none).
    role_keys: BTreeMap<String, KeyPair>,
}

/// Sign the operator's, system's and account's JWTs (the roles' scoped keys, the revocations in
/// `dir`) into `dir/resolver.conf`, and write `account.pub` and `leaf-account.conf`.
fn sign_account(dir: &Path, roles: &[Role], now_s: u64) -> Result<Signed, AuthError> {
    let operator = key(dir, "operator", KeyPair::new_operator)?;
    let system = key(dir, "account-SYS", KeyPair::new_account)?;
    let account = key(dir, &format!("account-{ACCOUNT_NAME}"), KeyPair::new_account)?;
    let scoped_roles: Vec<&Role> = roles.iter().filter(|r| r.connection_types.is_empty()).collect();
    let role_keys: BTreeMap<String, KeyPair> = scoped_roles
        .iter()
        .map(|r| Ok((r.name.clone(), key(dir, &format!("role-{}", r.name), KeyPair::new_account)?)))
        .collect::<Result<_, AuthError>>()?;
    let scoped: Vec<(&str, &KeyPair, &UserTemplate)> =
        scoped_roles.iter().map(|r| (r.name.as_str(), &role_keys[&r.name], &r.template)).collect();
    let revocations = read_revocations(dir)?;
    let none = BTreeMap::new();
    // The operator's and the system account's JWTs are signed once and kept: nats-server refuses
    // to reload a changed operator, and a changed system account (a revocation or a role change
    // is applied by a reload).
    let operator_jwt = signed_once(&dir.join("operator.jwt"), || jwt::operator(&operator, "leasehold", now_s))?;
    let system_jwt =
        signed_once(&dir.join("system.jwt"), || jwt::account(&operator, &system, "SYS", false, &[], &none, now_s))?;
    let account_jwt = jwt::account(&operator, &account, ACCOUNT_NAME, true, &scoped, &revocations, now_s)?;
    let resolver = format!(
        "# Generated by `leasehold auth setup` from the roles file: include it in every server.\n\
         # Regenerate (and reload the servers) after changing the roles or revoking a user; pods'\n\
         # credentials are issued without touching it (`leasehold auth issue`).\n\
         operator: \"{operator_jwt}\"\n\
         system_account: \"{sys}\"\n\
         resolver: MEMORY\n\
         resolver_preload: {{\n  {sys}: \"{system_jwt}\"\n  {acc}: \"{account_jwt}\"\n}}\n",
        sys = system.public_key(),
        acc = account.public_key(),
    );
    write_file(&dir.join("resolver.conf"), &resolver, false)?;
    write_file(&dir.join("account.pub"), &account.public_key(), false)?;
    let leaf_account = format!(
        "# Generated by `leasehold auth setup`: a DC server includes it after resolver.conf and binds\n\
         # its leaf-node remote to the account: `account: ${ACCOUNT_VARIABLE}`.\n{ACCOUNT_VARIABLE}: \"{}\"\n",
        account.public_key()
    );
    write_file(&dir.join("leaf-account.conf"), &leaf_account, false)?;
    Ok(Signed { account, role_keys })
}

/// The JWT kept at `path`, or the one `sign` makes (then kept there).
fn signed_once(path: &Path, sign: impl FnOnce() -> Result<String, jwt::JwtError>) -> Result<String, AuthError> {
    match std::fs::read_to_string(path) {
        Ok(token) => Ok(token.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = sign()?;
            write_file(path, &token, false)?;
            Ok(token)
        }
        Err(e) => Err(file_error(path, e)),
    }
}

fn read_revocations(dir: &Path) -> Result<BTreeMap<String, u64>, AuthError> {
    let path = dir.join(REVOCATIONS);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| file_error(&path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(file_error(&path, e)),
    }
}

/// Revoke the user `user_public_key` (`U…`): nats-server refuses its JWTs issued at or before
/// `at_s`, and closes its connections once it has the account signed again. Records it in
/// `dir/revocations.json` and signs the account again with the roles and DCs [`setup`] kept;
/// the servers apply it on their next reload.
pub fn revoke(dir: &Path, user_public_key: &str, at_s: u64, now_s: u64) -> Result<PathBuf, AuthError> {
    if !KeyPair::from_public_key(user_public_key).is_ok_and(|k| k.key_pair_type() == nkeys::KeyPairType::User) {
        return Err(AuthError::Creds(format!("{user_public_key:?} is not a user's public key (U…)")));
    }
    let roles_path = dir.join(ROLES_COPY);
    let roles_toml = std::fs::read_to_string(&roles_path).map_err(|e| file_error(&roles_path, e))?;
    let dcs_path = dir.join(DCS_COPY);
    let dcs = std::fs::read_to_string(&dcs_path).map_err(|e| file_error(&dcs_path, e))?;
    let dcs: SetupDcs = toml::from_str(&dcs).map_err(|e| file_error(&dcs_path, e))?;
    let roles = roles(&roles_toml, &dcs.dcs)?;
    let mut revocations = read_revocations(dir)?;
    let at = revocations.get(user_public_key).map_or(at_s, |&t| t.max(at_s));
    revocations.insert(user_public_key.to_string(), at);
    let text = serde_json::to_string_pretty(&revocations).map_err(|e| AuthError::Roles(e.to_string()))?;
    write_file(&dir.join(REVOCATIONS), &text, false)?;
    sign_account(dir, &roles, now_s)?;
    Ok(dir.join("resolver.conf"))
}

#[cfg(test)]
mod tests;

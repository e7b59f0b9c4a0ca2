//! One user's credential: issued with a role's key ([`issue`], [`issue_with_key`]), and read
//! back ([`read_creds`]: whose it is, for the agent's check of its pod id).

use super::files::file_error;
use super::{check_name, jwt, AuthError};
use nkeys::KeyPair;
use std::path::Path;

/// The tag a user's JWT carries naming the role that issued it (`role:pod-bkk`).
const ROLE_TAG: &str = "role:";

pub(super) fn scoped_creds(
    role_key: &KeyPair,
    account: &str,
    role: &str,
    name: &str,
    now_s: u64,
) -> Result<String, AuthError> {
    let user = KeyPair::new_user();
    let tags = [format!("{ROLE_TAG}{role}")];
    let token = jwt::scoped_user(role_key, account, &user, name, &tags, now_s)?;
    Ok(jwt::creds_file(&token, &user)?)
}

/// A `.creds` file for a new user `name` of `role` (e.g. `pod-bkk` and a pod id), signed with
/// the role's key from `dir` (made by [`super::setup`]). Needs `dir/keys/role-<role>.nk` and
/// `dir/account.pub` only.
pub fn issue(dir: &Path, role: &str, name: &str, now_s: u64) -> Result<String, AuthError> {
    check_name(role)?;
    let key_path = dir.join("keys").join(format!("role-{role}.nk"));
    if dir.join("creds").join(format!("{role}.creds")).exists() {
        return Err(AuthError::StandingRole(role.into()));
    }
    if !key_path.exists() {
        return Err(AuthError::UnknownRole { role: role.into(), dir: dir.into(), known: known_roles(dir) });
    }
    issue_with_key(&key_path, &dir.join("account.pub"), role, name, now_s)
}

/// [`issue`] from the role's key file and the account's public key file alone (what a DC's
/// provisioning holds, e.g. a Kubernetes Secret mounted into an init container).
pub fn issue_with_key(
    role_key: &Path,
    account_pub: &Path,
    role: &str,
    name: &str,
    now_s: u64,
) -> Result<String, AuthError> {
    check_name(role)?;
    check_name(name)?;
    let seed = std::fs::read_to_string(role_key).map_err(|e| file_error(role_key, e))?;
    let key = KeyPair::from_seed(seed.trim()).map_err(|e| file_error(role_key, e))?;
    let account = std::fs::read_to_string(account_pub).map_err(|e| file_error(account_pub, e))?;
    let account = account.trim();
    if !KeyPair::from_public_key(account).is_ok_and(|k| k.key_pair_type() == nkeys::KeyPairType::Account) {
        return Err(file_error(account_pub, "not an account's public key (A…)"));
    }
    if key.key_pair_type() != nkeys::KeyPairType::Account || key.public_key() == account {
        // The account's own key would sign a user with no template: no limits at all.
        return Err(file_error(role_key, "not a role's signing key (keys/role-<role>.nk)"));
    }
    scoped_creds(&key, account, role, name, now_s)
}

/// Whose a `.creds` file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredsUser {
    /// The user's name (a pod's credential: its pod id).
    pub name: String,
    /// The user's public key (`U…`): what a revocation names.
    pub public_key: String,
    /// When it was issued (Unix seconds, the issuer's clock).
    pub issued_at_s: u64,
    /// The role that issued it, if its JWT names one (`pod-bkk`).
    pub role: Option<String>,
}

/// What a `.creds` file's JWT says about its user. The JWT is not verified here: the server
/// does that when the holder connects.
pub fn read_creds(creds: &str) -> Result<CredsUser, AuthError> {
    let bad = |why: &str| AuthError::Creds(why.to_string());
    let mut lines = creds.lines().map(str::trim);
    lines.find(|l| l.starts_with("-----BEGIN NATS USER JWT")).ok_or_else(|| bad("no user JWT in it"))?;
    let token = lines.next().ok_or_else(|| bad("no user JWT in it"))?;
    let payload = token.split('.').nth(1).ok_or_else(|| bad("its JWT has no claims"))?;
    let claims = data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes()).map_err(|e| bad(&e.to_string()))?;
    let claims: serde_json::Value = serde_json::from_slice(&claims).map_err(|e| bad(&e.to_string()))?;
    let name = claims["name"].as_str().ok_or_else(|| bad("its JWT names no user"))?;
    let public_key = claims["sub"].as_str().ok_or_else(|| bad("its JWT has no user key"))?;
    if !creds.contains("-----BEGIN USER NKEY SEED") {
        return Err(bad("no nkey seed in it"));
    }
    let tags = claims["nats"]["tags"].as_array().into_iter().flatten().filter_map(|t| t.as_str());
    let role = tags.filter_map(|t| t.strip_prefix(ROLE_TAG)).next().map(String::from);
    let issued_at_s = claims["iat"].as_u64().unwrap_or(0);
    Ok(CredsUser { name: name.to_string(), public_key: public_key.to_string(), issued_at_s, role })
}

/// [`read_creds`] of the file at `path`.
pub fn read_creds_file(path: &Path) -> Result<CredsUser, AuthError> {
    let creds = std::fs::read_to_string(path).map_err(|e| file_error(path, e))?;
    read_creds(&creds).map_err(|e| file_error(path, e))
}

fn known_roles(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("keys"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("role-")?.strip_suffix(".nk").map(String::from))
        .collect();
    names.sort();
    if names.is_empty() {
        "none: run `leasehold auth setup` first".into()
    } else {
        names.join(", ")
    }
}

//! NATS JWTs (operator, account, user; JWT v2 as nats-server reads them) signed with nkeys, and
//! `.creds` files. Only what Leasehold's auth setup issues is modelled: an account's limits
//! (JetStream on or off) and its signing keys scoped to a role's permission template; users
//! signed by a scoped key, which carry only their name and tags (the key's template decides
//! their permissions; nats-server refuses a scoped user with permissions of its own); and users
//! signed by the account's own key with their permissions and allowed connection types in the
//! JWT (a template's connection types are not applied by nats-server).
//!
//! Why not a crate: `nats-jwt` 0.3 issues neither operator JWTs nor scoped signing keys;
//! `nats-io-jwt` 0.1 regenerates its own source in its build script (and runs `cargo fmt`).

use data_encoding::{BASE32_NOPAD, BASE64URL_NOPAD};
use nkeys::KeyPair;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

const HEADER: &str = r#"{"typ":"JWT","alg":"ed25519-nkey"}"#;
/// A limit nats-server reads as "no limit".
const NO_LIMIT: i64 = -1;

/// Subjects allowed. Never empty: nats-server reads a permission with no allow list as "allow
/// everything" (the roles file refuses an empty list).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Allow {
    pub allow: Vec<String>,
}

/// A response permission: publish to the reply subject of up to `max` requests received, each
/// for `ttl` nanoseconds (0: the server's default, 2 minutes). NATS config's
/// `allow_responses: true` is `max` 1, `ttl` 0.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Responses {
    pub max: i64,
    pub ttl: i64,
}

/// What a scoped signing key's users may do: the template nats-server applies to every user
/// the key signs (`{{name()}}` in a subject becomes the user's name).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct UserTemplate {
    #[serde(rename = "pub")]
    pub publish: Allow,
    #[serde(rename = "sub")]
    pub subscribe: Allow,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resp: Option<Responses>,
    subs: i64,
    data: i64,
    payload: i64,
}

impl UserTemplate {
    pub fn new(publish: Vec<String>, subscribe: Vec<String>, resp: Option<Responses>) -> Self {
        Self {
            publish: Allow { allow: publish },
            subscribe: Allow { allow: subscribe },
            resp,
            subs: NO_LIMIT,
            data: NO_LIMIT,
            payload: NO_LIMIT,
        }
    }
}

#[derive(Serialize)]
struct SigningKeyScope<'a> {
    kind: &'static str,
    key: String,
    role: &'a str,
    template: &'a UserTemplate,
}

#[derive(Serialize)]
struct AccountLimits {
    subs: i64,
    data: i64,
    payload: i64,
    imports: i64,
    exports: i64,
    wildcards: bool,
    conn: i64,
    leaf: i64,
    mem_storage: i64,
    disk_storage: i64,
    streams: i64,
    consumer: i64,
}

/// The `nats` part of a JWT's claims.
#[derive(Serialize)]
#[serde(untagged)]
enum Nats<'a> {
    Operator {
        #[serde(rename = "type")]
        kind: &'static str,
        version: u8,
    },
    Account {
        #[serde(rename = "type")]
        kind: &'static str,
        version: u8,
        limits: AccountLimits,
        signing_keys: Vec<SigningKeyScope<'a>>,
        /// User public key → Unix seconds: that user's JWTs issued at or before are refused.
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        revocations: &'a BTreeMap<String, u64>,
    },
    User {
        #[serde(rename = "type")]
        kind: &'static str,
        version: u8,
        issuer_account: String,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        tags: &'a [String],
        /// Only for a user signed by the account's own key (a scoped user carries none).
        #[serde(flatten, skip_serializing_if = "Option::is_none")]
        permissions: Option<&'a UserTemplate>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        allowed_connection_types: &'a [String],
    },
}

#[derive(Serialize)]
struct Claims<'a> {
    jti: String,
    iat: u64,
    iss: String,
    name: &'a str,
    sub: String,
    nats: Nats<'a>,
}

/// A JWT or `.creds` file could not be made.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("cannot sign: {0}")]
    Sign(String),
}

fn sign(mut claims: Claims<'_>, signer: &KeyPair) -> Result<String, JwtError> {
    // The id: a hash of the claims (nats-server does not check it).
    let unhashed = serde_json::to_vec(&claims).map_err(|e| JwtError::Sign(e.to_string()))?;
    claims.jti = BASE32_NOPAD.encode(&Sha256::digest(&unhashed));
    let body = serde_json::to_vec(&claims).map_err(|e| JwtError::Sign(e.to_string()))?;
    let signed = format!("{}.{}", BASE64URL_NOPAD.encode(HEADER.as_bytes()), BASE64URL_NOPAD.encode(&body));
    let signature = signer.sign(signed.as_bytes()).map_err(|e| JwtError::Sign(e.to_string()))?;
    Ok(format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature)))
}

/// The operator's own JWT (self-signed), trusted by every server of the deployment.
pub fn operator(operator: &KeyPair, name: &str, issued_at_s: u64) -> Result<String, JwtError> {
    let nats = Nats::Operator { kind: "operator", version: 2 };
    let claims = Claims {
        jti: String::new(),
        iat: issued_at_s,
        iss: operator.public_key(),
        name,
        sub: operator.public_key(),
        nats,
    };
    sign(claims, operator)
}

/// An account's JWT, signed by the operator: no limits but JetStream's (on or off), one scoped
/// signing key per role (`(role, key, template)`), and the users it revokes.
pub fn account(
    operator: &KeyPair,
    account: &KeyPair,
    name: &str,
    jetstream: bool,
    roles: &[(&str, &KeyPair, &UserTemplate)],
    revocations: &BTreeMap<String, u64>,
    issued_at_s: u64,
) -> Result<String, JwtError> {
    let storage = if jetstream { NO_LIMIT } else { 0 };
    let limits = AccountLimits {
        subs: NO_LIMIT,
        data: NO_LIMIT,
        payload: NO_LIMIT,
        imports: NO_LIMIT,
        exports: NO_LIMIT,
        wildcards: true,
        conn: NO_LIMIT,
        leaf: NO_LIMIT,
        mem_storage: storage,
        disk_storage: storage,
        streams: storage,
        consumer: storage,
    };
    let signing_keys = roles
        .iter()
        .map(|(role, key, template)| SigningKeyScope { kind: "user_scope", key: key.public_key(), role, template })
        .collect();
    let nats = Nats::Account { kind: "account", version: 2, limits, signing_keys, revocations };
    let claims = Claims {
        jti: String::new(),
        iat: issued_at_s,
        iss: operator.public_key(),
        name,
        sub: account.public_key(),
        nats,
    };
    sign(claims, operator)
}

/// A user's JWT, signed by one of `account`'s scoped signing keys: the user carries only its
/// name and `tags`; the key's template gives its permissions.
pub fn scoped_user(
    role_key: &KeyPair,
    account_public_key: &str,
    user: &KeyPair,
    name: &str,
    tags: &[String],
    issued_at_s: u64,
) -> Result<String, JwtError> {
    user_jwt(role_key, account_public_key, user, name, tags, None, &[], issued_at_s)
}

/// A user's JWT signed by the account's own key, with its permissions and the connection types
/// it may use (e.g. `LEAFNODE` only) in the JWT itself.
pub fn account_user(
    account: &KeyPair,
    user: &KeyPair,
    name: &str,
    permissions: &UserTemplate,
    connection_types: &[String],
    issued_at_s: u64,
) -> Result<String, JwtError> {
    user_jwt(account, &account.public_key(), user, name, &[], Some(permissions), connection_types, issued_at_s)
}

#[allow(clippy::too_many_arguments)] // the claims of a user, one argument each
fn user_jwt(
    signer: &KeyPair,
    account_public_key: &str,
    user: &KeyPair,
    name: &str,
    tags: &[String],
    permissions: Option<&UserTemplate>,
    allowed_connection_types: &[String],
    issued_at_s: u64,
) -> Result<String, JwtError> {
    let nats = Nats::User {
        kind: "user",
        version: 2,
        issuer_account: account_public_key.to_string(),
        tags,
        permissions,
        allowed_connection_types,
    };
    let claims =
        Claims { jti: String::new(), iat: issued_at_s, iss: signer.public_key(), name, sub: user.public_key(), nats };
    sign(claims, signer)
}

/// A `.creds` file: the user's JWT and its nkey seed, in the format every NATS client reads.
pub fn creds_file(jwt: &str, user: &KeyPair) -> Result<String, JwtError> {
    let seed = user.seed().map_err(|e| JwtError::Sign(e.to_string()))?;
    Ok(format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    ))
}

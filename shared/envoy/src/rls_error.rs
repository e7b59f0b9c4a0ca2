//! Why a ratelimit configuration is refused: the file, and the rule it breaks.

/// A configuration that can't be used; nothing of it is applied.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {rule}")]
pub struct RlsConfigError {
    /// The file (or source name) it came from.
    pub file: String,
    #[source]
    pub rule: RlsRule,
}

/// The rule of ratelimit's configuration a file breaks.
#[derive(Debug, thiserror::Error)]
pub enum RlsRule {
    #[error("not a ratelimit config: {0}")]
    NotRatelimitConfig(#[source] Box<serde_saphyr::Error>),
    #[error("config file cannot have empty domain")]
    EmptyDomain,
    #[error("duplicate domain '{0}' in config file")]
    DuplicateDomain(String),
    #[error("{at}: descriptor has empty key")]
    EmptyKey { at: String },
    #[error("duplicate descriptor composite key '{key}'")]
    DuplicateKey { key: String },
    #[error("{key}: should not specify rate limit unit when unlimited")]
    UnitWhenUnlimited { key: String },
    #[error("{key}: invalid rate limit unit '{unit}'")]
    InvalidUnit { key: String, unit: String },
    #[error("{key}: should not have an empty replaces entry")]
    EmptyReplaces { key: String },
    #[error("{key}: replaces should not contain name of same descriptor")]
    ReplacesItself { key: String },
    #[error("{key}: its limit id {id:?} is {len} bytes, more than {max}; shorten the domain, keys or values")]
    LimitIdTooLong { key: String, id: String, len: usize, max: usize },
    #[error("duplicate descriptor composite key '{key}' (also '{other}'): one limit id {id:?}")]
    SameLimitId { key: String, other: String, id: String },
}

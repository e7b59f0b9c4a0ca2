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
    #[error("error loading config file: {0}")]
    NotRatelimitConfig(#[source] Box<serde_saphyr::Error>),
    #[error("error loading config file: the document is {0}, not a map")]
    NotAMap(String),
    #[error("config error, key is not of type string: {0}")]
    KeyNotText(String),
    #[error("config error, unknown key '{0}'")]
    UnknownKey(String),
    #[error("config error, yaml file contains list of type other than map: {0}")]
    ListOfNonMaps(String),
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
    #[error("share_threshold can only be used with wildcard values (containing '*'), but found key '{composite}'")]
    ShareThresholdWithoutWildcard { composite: String },
    #[error("{key}: share_threshold with '*' in the key but not in the value is not served (ratelimit would count each request key apart)")]
    ShareThresholdOnKey { key: String },
    #[error("{key}: its bounded limit id {id:?} is also that of '{other}'; change either")]
    SameLimitId { key: String, other: String, id: String },
}

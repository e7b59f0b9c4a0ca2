//! Settings as every service reads them: defaults, then a TOML file, then `<PREFIX>*`
//! environment variables (then, for a command with flags, its flags), each over the one before;
//! then checked before anything starts.
//!
//! A setting nobody knows is refused, not ignored: a misspelt `durabilty = "zero-loss"` would
//! otherwise leave the service running the other mode. The known settings are the ones the
//! defaults serialize (every field of the settings struct, `None` included, flattened ones at
//! the top); the error names the setting, where it came from (the file, or the environment
//! variable) and the nearest known setting.

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Value};
use figment::Figment;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;

/// Settings that could not be read, or were read and are invalid.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("configuration: {0}")]
    Load(String),
    #[error("configuration: {0}")]
    Invalid(String),
    /// A setting that breaks a rule of the lease core.
    #[error("configuration: {0}")]
    Rule(#[from] leasehold_core::InvalidSetting),
    /// An id setting (a limit, a DC, an instance) that is not a usable id.
    #[error("configuration: {0}")]
    Id(#[from] leasehold_core::wire::WireError),
    /// A `nats_creds_file` that cannot be read.
    #[error("configuration: nats_creds_file: {0}")]
    CredsFile(#[source] leasehold_nats::auth::AuthError),
    /// A setting a service's own rules refuse (such as a definition the coordinator cannot run).
    #[error("configuration: {0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Defaults, then the TOML `file` (which must exist if given), then `<env_prefix>*` variables;
/// then checked by `validate` before anything starts. Unknown settings are refused.
pub fn load_settings<T: Default + Serialize + DeserializeOwned>(
    file: Option<&Path>,
    env_prefix: &str,
    validate: impl FnOnce(&T) -> Result<(), SettingsError>,
) -> Result<T, SettingsError> {
    let f = defaults_and_file::<T>(file)?.merge(Env::prefixed(env_prefix));
    let settings = extract_known::<T>(&f, env_prefix)?;
    validate(&settings)?;
    Ok(settings)
}

/// [`load_settings`] for a command that also takes flags: defaults, the TOML `file`, the
/// environment, then `flags` (serialized without the flags not given), each over the one
/// before. The settings named in `verbatim` are read from the environment as the text they are
/// (figment would read `LEASEHOLD_…_TOKEN=0123` as the number 123).
pub fn load_settings_with_flags<T: Default + Serialize + DeserializeOwned>(
    file: Option<&Path>,
    env_prefix: &str,
    verbatim: &[&str],
    flags: &impl Serialize,
    validate: impl FnOnce(&T) -> Result<(), SettingsError>,
) -> Result<T, SettingsError> {
    let mut f = defaults_and_file::<T>(file)?.merge(Env::prefixed(env_prefix).ignore(verbatim));
    for name in verbatim {
        let var = format!("{env_prefix}{}", name.to_ascii_uppercase());
        match std::env::var(&var) {
            Ok(text) => f = f.merge(Serialized::default(name, text)),
            Err(std::env::VarError::NotPresent) => {}
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(SettingsError::Load(format!("{var} is not UTF-8")));
            }
        }
    }
    let settings = extract_known::<T>(&f.merge(Serialized::defaults(flags)), env_prefix)?;
    validate(&settings)?;
    Ok(settings)
}

fn defaults_and_file<T: Default + Serialize>(file: Option<&Path>) -> Result<Figment, SettingsError> {
    let f = Figment::from(Serialized::defaults(T::default()));
    match file {
        Some(path) if !path.is_file() => Err(SettingsError::Load(format!("file {} not found", path.display()))),
        Some(path) => Ok(f.merge(Toml::file(path))),
        None => Ok(f),
    }
}

/// `f`'s settings as `T`, refusing any setting `T`'s defaults don't name (one from the
/// environment is named by its variable, `env_prefix` and the key).
fn extract_known<T: Default + Serialize + DeserializeOwned>(f: &Figment, env_prefix: &str) -> Result<T, SettingsError> {
    let load = |e: figment::Error| SettingsError::Load(e.to_string());
    let known = serde_json::to_value(T::default()).map_err(|e| SettingsError::Load(e.to_string()))?;
    let given: Dict = f.extract().map_err(load)?;
    if let Some(unknown) = first_unknown(&known, &given, "") {
        return Err(SettingsError::Load(describe_unknown(f, env_prefix, &known, &unknown)));
    }
    f.extract().map_err(load)
}

/// The first (in key order) setting path in `given` that `known` (the defaults, serialized) has
/// no place for, at any depth. Below a known setting that is not a table (a list, an unset
/// option, an empty map) anything goes: its own type reads it. A table that names another
/// variant of an internally tagged enum than the default (`fail_mode = { mode = "best-effort",
/// … }` where the default is `strict`) is left to serde too: the default shows only its own
/// variant's fields.
fn first_unknown(known: &serde_json::Value, given: &Dict, prefix: &str) -> Option<String> {
    let serde_json::Value::Object(fields) = known else { return None };
    if fields.is_empty() || (!prefix.is_empty() && names_another_variant(fields, given)) {
        return None;
    }
    for (key, value) in given {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match (fields.get(key), value) {
            (None, _) => return Some(path),
            (Some(inner), Value::Dict(_, dict)) => {
                if let Some(found) = first_unknown(inner, dict, &path) {
                    return Some(found);
                }
            }
            (Some(_), _) => {}
        }
    }
    None
}

/// A tag (`mode`, `type` or `kind`: a text the default has) that `given` sets to another text.
fn names_another_variant(fields: &serde_json::Map<String, serde_json::Value>, given: &Dict) -> bool {
    ["mode", "type", "kind"].iter().any(|tag| match (fields.get(*tag), given.get(*tag)) {
        (Some(serde_json::Value::String(default)), Some(Value::String(_, chosen))) => default != chosen,
        _ => false,
    })
}

/// "unknown setting `durabilty` in keys.toml; did you mean `durability`?"
fn describe_unknown(f: &Figment, env_prefix: &str, known: &serde_json::Value, path: &str) -> String {
    let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
    let source = match f.find_metadata(path) {
        Some(md) => match &md.source {
            Some(figment::Source::File(file)) => format!(" in {}", file.display()),
            _ if md.name.contains("environment") => {
                format!(" from environment variable {env_prefix}{}", path.to_ascii_uppercase())
            }
            _ => format!(" from {}", md.name),
        },
        None => String::new(),
    };
    let siblings = parent.split('.').filter(|p| !p.is_empty()).try_fold(known, |v, p| v.get(p));
    let nearest = siblings
        .and_then(|v| v.as_object())
        .and_then(|fields| fields.keys().min_by_key(|k| strsim::levenshtein(k, key)))
        // Close in spelling, or the same name without its unit (`grace` for `grace_ms`).
        .filter(|k| strsim::levenshtein(k, key) <= key.len().max(3) / 3 + 1 || k.starts_with(&format!("{key}_")));
    match nearest {
        Some(k) => {
            let k = if parent.is_empty() { k.clone() } else { format!("{parent}.{k}") };
            format!("unknown setting `{path}`{source}; did you mean `{k}`?")
        }
        None => format!("unknown setting `{path}`{source}"),
    }
}

/// The settings `T` takes and their defaults, one per line (`key = default`, nested tables as
/// dotted keys), for a command's `--help`: true by construction, since it is what the defaults
/// serialize.
pub fn settings_help<T: Default + Serialize>(env_prefix: &str) -> String {
    let mut lines = Vec::new();
    if let Ok(defaults) = serde_json::to_value(T::default()) {
        help_lines(&defaults, "", &mut lines);
    }
    format!(
        "Settings (in the --config TOML file, or as {env_prefix}<NAME> environment variables), \
         with their defaults; an unknown one is refused:\n{}",
        lines.join("\n")
    )
}

fn help_lines(value: &serde_json::Value, prefix: &str, lines: &mut Vec<String>) {
    let serde_json::Value::Object(fields) = value else { return };
    for (key, value) in fields {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            serde_json::Value::Object(inner) if !inner.is_empty() => help_lines(value, &path, lines),
            serde_json::Value::Null => lines.push(format!("  {path}  (unset)")),
            other => lines.push(format!("  {path} = {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Inner {
        ttl_ms: u64,
    }

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    struct Sample {
        durability: String,
        token: Option<String>,
        inner: Inner,
        names: Vec<String>,
        #[serde(flatten)]
        flat: Inner2,
        fail_mode: FailMode,
    }

    /// Variants with fields of their own: the defaults serialize only the default one's.
    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "mode", rename_all = "kebab-case")]
    enum FailMode {
        #[default]
        Strict,
        BestEffort {
            emergency: u64,
        },
    }

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Inner2 {
        limit: String,
    }

    fn load_toml(text: &str) -> Result<Sample, SettingsError> {
        let f = Figment::from(Serialized::defaults(Sample::default())).merge(Toml::string(text));
        extract_known::<Sample>(&f, "SAMPLE_")
    }

    #[test]
    fn a_misspelt_setting_is_refused_with_the_nearest_known_one() {
        let err = load_toml("durabilty = \"zero-loss\"").unwrap_err().to_string();
        assert!(err.contains("unknown setting `durabilty`") && err.contains("did you mean `durability`?"), "{err}");
        let err = load_toml("[inner]\nttl_sm = 3").unwrap_err().to_string();
        assert!(err.contains("`inner.ttl_sm`") && err.contains("did you mean `inner.ttl_ms`?"), "{err}");
        let err = load_toml("[inner]\nttl = 3").unwrap_err().to_string();
        assert!(err.contains("did you mean `inner.ttl_ms`?"), "{err}");
        let err = load_toml("ttl_ms = 3").unwrap_err().to_string();
        assert!(err.contains("unknown setting `ttl_ms`"), "a nested setting is not a top one: {err}");
        let err = load_toml("limt = \"api\"").unwrap_err().to_string();
        assert!(err.contains("did you mean `limit`?"), "{err}");
        let err = load_toml("completely_different = 1").unwrap_err().to_string();
        assert!(err.contains("unknown setting `completely_different`") && !err.contains("did you mean"), "{err}");
    }

    #[test]
    fn help_lists_every_setting_with_its_default() {
        let help = settings_help::<Sample>("SAMPLE_");
        for line in ["  durability = \"\"", "  token  (unset)", "  inner.ttl_ms = 0", "  limit = \"\"", "  names = []"]
        {
            assert!(help.lines().any(|l| l == line), "{line:?} in\n{help}");
        }
        assert!(help.contains("SAMPLE_<NAME>"), "{help}");
    }

    #[test]
    fn known_settings_unset_options_lists_and_flattened_ones_load() {
        let s = load_toml("durability = \"x\"\ntoken = \"t\"\nnames = [\"a\"]\nlimit = \"api\"\n[inner]\nttl_ms = 5")
            .unwrap();
        assert_eq!((s.durability.as_str(), s.token.as_deref(), s.inner.ttl_ms), ("x", Some("t"), 5));
        assert_eq!((s.names.len(), s.flat.limit.as_str()), (1, "api"));
        let s = load_toml("fail_mode = { mode = \"best-effort\", emergency = 7 }").unwrap();
        assert_eq!(s.fail_mode, FailMode::BestEffort { emergency: 7 });
        let err = load_toml("fail_mode = { mode = \"strict\", emergency = 7 }").unwrap_err().to_string();
        assert!(err.contains("unknown setting `fail_mode.emergency`"), "{err}");
    }
}

//! Writing the operator's files: secrets owner-only, every file whole or not at all.

use super::AuthError;
use nkeys::KeyPair;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub(super) fn file_error(path: &Path, e: impl std::fmt::Display) -> AuthError {
    AuthError::File { path: path.to_path_buf(), reason: e.to_string() }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Write `contents` to `path` whole: into a new file of a name nobody else uses (never one that
/// exists, never through a link), synced, then renamed over `path`. Readable only by its owner
/// when `secret`.
pub fn write_file(path: &Path, contents: &str, secret: bool) -> Result<(), AuthError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let unique = format!(".{name}.{}.{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let tmp = path.with_file_name(unique);
    let mode = if secret { 0o600 } else { 0o644 };
    let written = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(file_error(&tmp, e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        file_error(path, e)
    })
}

/// `path` as a directory only its owner may enter (made if missing; its mode set every time).
pub(super) fn private_dir(path: &Path) -> Result<(), AuthError> {
    std::fs::create_dir_all(path).map_err(|e| file_error(path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(|e| file_error(path, e))
}

/// The key in `dir/keys/<file>.nk`, made (with `new`) if there is none yet.
pub(super) fn key(dir: &Path, file: &str, new: fn() -> KeyPair) -> Result<KeyPair, AuthError> {
    let path = dir.join("keys").join(format!("{file}.nk"));
    match std::fs::read_to_string(&path) {
        Ok(seed) => KeyPair::from_seed(seed.trim()).map_err(|e| file_error(&path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let kp = new();
            write_file(&path, &kp.seed().map_err(|e| file_error(&path, e))?, true)?;
            Ok(kp)
        }
        Err(e) => Err(file_error(&path, e)),
    }
}

//! Small file helpers: every file is written whole or not at all (a temporary file in
//! the same directory, synced, then renamed over the old one), secrets are created with
//! mode 0600 (never readable by others, not even for a moment), and the CA directory is
//! locked (flock on `.lock`) while one process issues or revokes.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::PkiError;

/// Mode of private keys.
pub(crate) const MODE_SECRET: u32 = 0o600;
/// Mode of certificates, CRLs and the register: readable by the processes that use them.
pub(crate) const MODE_PUBLIC: u32 = 0o644;
/// Mode of directories this crate creates (they hold keys).
const MODE_DIR: u32 = 0o700;

/// Creates `dir` and its missing parents with mode 0700; an existing one is left as it is.
pub(crate) fn dir_create(dir: &Path) -> Result<(), PkiError> {
    DirBuilder::new().recursive(true).mode(MODE_DIR).create(dir).map_err(|e| PkiError::io(dir, e))
}

/// Replaces `path` with `bytes` atomically, the new file having `mode` from its creation.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), PkiError> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| PkiError::io(path, std::io::ErrorKind::InvalidInput.into()))?;
    let temp: PathBuf = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let written = (|| {
        let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&temp)?;
        // A leftover temporary file from a crashed run keeps its old mode: set it again.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        // The rename is durable once the directory is synced.
        File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.map_err(|e| PkiError::io(path, e))
}

/// Reads a whole file, naming it in the error.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, PkiError> {
    std::fs::read(path).map_err(|e| PkiError::io(path, e))
}

/// The CA directory's exclusive lock, held until dropped.
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    /// Blocks until this process holds `dir/.lock`.
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock, PkiError> {
        let path = dir.join(".lock");
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(MODE_SECRET)
            .open(&path)
            .map_err(|e| PkiError::io(&path, e))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| PkiError::io(&path, e.into()))?;
        Ok(DirLock { _file: file })
    }
}

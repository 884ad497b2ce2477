//! A temporary directory shared by a process and the children it starts, removed by the
//! last of them to end: the demo's data in `/dev/shm`, which must not outlive the demo
//! however the demo ends — a SIGKILL included, which runs none of its code.
//!
//! Every process that uses the directory holds a shared `flock` on `DIR/holders.lock`
//! for as long as it runs; the kernel drops a process's lock when the process ends,
//! however it ends. A holder that ends cleanly (its [`Holder`] dropped) releases its lock
//! and then asks for an exclusive one without waiting: it gets it only when no other
//! process holds the file, and then removes the directory. Of holders ending together,
//! the last to release its lock finds no other and removes the directory, so it never
//! stays behind a clean end. A holder killed outright removes nothing; the next one to
//! end cleanly does.
//!
//! A holder whose parent, another holder, was killed outright may end before the kernel
//! has dropped the dead parent's lock: a process killed with many files open closes
//! them one by one, the pipe its children read (which tells them to stop) before, say,
//! the lock file. Such a holder ([`Holder::linger`]) keeps asking for the exclusive lock
//! for a while, so that it, the last to go, still removes the directory.
//!
//! Known limit: when the last holder is itself killed outright, the directory stays —
//! for the demo, a SIGKILL before its nodes start or after they have stopped (while it
//! replays their data), moments of a second or two.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation};

/// The file whose shared locks mark the directory's holders.
const LOCK_FILE: &str = "holders.lock";

/// This process's hold on a shared temporary directory; dropping it releases the hold
/// and removes the directory when no other process holds it.
pub(crate) struct Holder {
    dir: PathBuf,
    lock: Option<File>,
    /// How long dropping it keeps asking for the exclusive lock while others hold it.
    linger: Duration,
}

impl Holder {
    /// Makes `dir` a shared temporary directory (its lock file) and holds it: the
    /// directory's creator, before it starts the children that [`Holder::join`] it.
    pub(crate) fn create(dir: &Path) -> Result<Holder, String> {
        let path = dir.join(LOCK_FILE);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Holder::hold(dir, file)
    }

    /// Holds a directory another process made a shared temporary directory. Refused when
    /// it has no lock file: a directory nobody declared temporary is never removed.
    pub(crate) fn join(dir: &Path) -> Result<Holder, String> {
        let path = dir.join(LOCK_FILE);
        let file = File::open(&path).map_err(|e| {
            format!(
                "{}: {e} (only a directory made temporary by the process that created it is removed)",
                path.display()
            )
        })?;
        Holder::hold(dir, file)
    }

    /// Takes the shared lock without waiting: an exclusive one is held only by a last
    /// holder removing the directory, which a newcomer must not join.
    fn hold(dir: &Path, file: File) -> Result<Holder, String> {
        flock(&file, FlockOperation::NonBlockingLockShared)
            .map_err(|e| format!("{}: {e} (the directory is being removed)", dir.join(LOCK_FILE).display()))?;
        Ok(Holder { dir: dir.to_path_buf(), lock: Some(file), linger: Duration::ZERO })
    }

    /// Dropped, keeps asking for the exclusive lock for up to `linger` (every 20 ms)
    /// while another process holds the directory: for a holder that ends because its
    /// parent ended, whose lock may outlive it by a moment (the module's docs).
    pub(crate) fn linger(&mut self, linger: Duration) {
        self.linger = linger;
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let Some(file) = self.lock.take() else { return };
        // Release first: two holders that each asked for the exclusive lock while still
        // holding the shared one could both be refused, and the directory would stay.
        let _ = flock(&file, FlockOperation::Unlock);
        let deadline = Instant::now() + self.linger;
        while flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            if Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => tracing::info!(dir = %self.dir.display(), "the last holder: temporary directory removed"),
            // Another lingering holder removed it first (the lock is on the file, which
            // outlives its name while open).
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(dir = %self.dir.display(), %error, "temporary directory not removed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_holder_to_end_removes_the_directory() {
        let parent = tempfile::tempdir().expect("a temporary directory");
        let dir = parent.path().join("shared");
        std::fs::create_dir(&dir).expect("the shared directory");
        let creator = Holder::create(&dir).expect("created");
        let child = Holder::join(&dir).expect("joined");
        drop(creator);
        assert!(dir.exists(), "a holder remains: the directory stays");
        drop(child);
        assert!(!dir.exists(), "the last holder removed the directory");
    }

    #[test]
    fn a_lingering_holder_removes_the_directory_once_a_slow_dying_one_lets_go() {
        let parent = tempfile::tempdir().expect("a temporary directory");
        let dir = parent.path().join("shared");
        std::fs::create_dir(&dir).expect("the shared directory");
        let dying = Holder::create(&dir).expect("created");
        let mut child = Holder::join(&dir).expect("joined");
        child.linger(Duration::from_secs(5));
        // The parent's lock goes 200 ms after the child has begun to end.
        let let_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let mut dying = dying;
            drop(dying.lock.take());
        });
        drop(child);
        assert!(!dir.exists(), "the lingering child removed the directory");
        let_go.join().expect("the parent let go");
    }

    #[test]
    fn a_directory_nobody_made_temporary_cannot_be_joined() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let refused = Holder::join(dir.path()).err().expect("refused");
        assert!(refused.contains(LOCK_FILE), "{refused}");
        assert!(dir.path().exists());
    }

    #[test]
    fn a_holder_killed_outright_leaves_removal_to_the_next() {
        let parent = tempfile::tempdir().expect("a temporary directory");
        let dir = parent.path().join("shared");
        std::fs::create_dir(&dir).expect("the shared directory");
        let creator = Holder::create(&dir).expect("created");
        let mut killed = Holder::join(&dir).expect("joined");
        // Killed outright: its file is closed (the kernel drops its lock), no removal tried.
        drop(killed.lock.take());
        drop(killed);
        assert!(dir.exists(), "the creator still holds it");
        drop(creator);
        assert!(!dir.exists(), "the next holder to end removed it");
    }
}

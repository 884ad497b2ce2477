//! The FIX session store reader on arbitrary file bytes (truncated, corrupt, huge
//! lengths, damage with valid CRCs): it opens, keeps a prefix, replays, appends, never
//! a panic.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// A scratch directory of this process: in memory where there is /dev/shm (the store
/// syncs, which a disk makes slow), else under the system's temporary directory.
static DIR: OnceLock<PathBuf> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let dir = DIR.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        let base = if shm.is_dir() { shm } else { std::env::temp_dir() };
        base.join(format!("bourse-fix-fuzz-store-{}", std::process::id()))
    });
    bourse_fix::fuzzing::store_file(dir, data);
});

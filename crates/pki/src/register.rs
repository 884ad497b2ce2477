//! The register of what a CA issued and revoked: `issued.json` in the CA directory,
//! rewritten whole (atomically) under the directory's lock. It is the CA's memory: the
//! CRL is rebuilt from it, and `bourse pki list` reads it. Certificates themselves are
//! not kept here, only what identifies and revokes them.

use std::path::Path;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::files::{self, MODE_PUBLIC};
use crate::{Identity, PkiError};

/// Everything the CA remembers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Register {
    /// The number of the CRL now in `crl.pem`; the next one is higher.
    pub(crate) crl_number: u64,
    /// Every certificate issued, oldest first.
    pub(crate) certificates: Vec<Record>,
}

/// One issued certificate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// Lowercase hex, no separators (as `bourse pki list` shows it).
    pub(crate) serial: String,
    pub(crate) identity: Identity,
    pub(crate) hosts: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub(crate) not_before: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub(crate) not_after: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option", default)]
    pub(crate) revoked_at: Option<OffsetDateTime>,
}

impl Register {
    pub(crate) fn load(path: &Path) -> Result<Register, PkiError> {
        let bytes = files::read(path)?;
        serde_json::from_slice(&bytes).map_err(|source| PkiError::Register { path: path.to_path_buf(), source })
    }

    pub(crate) fn store(&self, path: &Path) -> Result<(), PkiError> {
        let mut bytes = serde_json::to_vec_pretty(self)
            .map_err(|source| PkiError::Register { path: path.to_path_buf(), source })?;
        bytes.push(b'\n');
        files::write_atomic(path, &bytes, MODE_PUBLIC)
    }
}

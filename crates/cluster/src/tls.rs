//! A member's mutual TLS on the Raft transport: its certificate, the cluster's CA and
//! the CA's revocation list (files `bourse pki` issued), as the transport's server and
//! client configurations.
//!
//! [`MemberTls::reload`] re-reads the files (a renewed certificate, a new CRL) and then
//! ends every Raft connection open in either direction: members reconnect within
//! milliseconds with a new handshake, which a revoked peer no longer passes. Without
//! that, a revoked member's open connections would outlive its revocation.

use std::sync::Arc;

use bourse_pki::{PkiError, ReloadableClientConfig, ReloadableServerConfig, TlsFiles};
use tokio::sync::watch;

/// A member's TLS configurations, shared by its transport's server and its clients.
#[derive(Clone)]
pub struct MemberTls {
    pub(crate) server: Arc<ReloadableServerConfig>,
    pub(crate) client: Arc<ReloadableClientConfig>,
    /// Counts reloads: a connection made under an older count is ended.
    generation: Arc<watch::Sender<u64>>,
}

impl MemberTls {
    /// From the files `bourse pki` issued to this member.
    pub fn load(files: &TlsFiles) -> Result<MemberTls, PkiError> {
        Ok(MemberTls {
            server: Arc::new(ReloadableServerConfig::server(files.clone())?),
            client: Arc::new(ReloadableClientConfig::client(files.clone())?),
            generation: Arc::new(watch::channel(0).0),
        })
    }

    /// Re-reads the certificate, the key, the CA and its revocation list, then ends the
    /// connections made before. A failed reload changes nothing.
    pub fn reload(&self) -> Result<(), PkiError> {
        self.server.reload()?;
        self.client.reload()?;
        self.generation.send_modify(|generation| *generation += 1);
        Ok(())
    }

    /// The reload count now.
    pub(crate) fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Fires at the next reload.
    pub fn reloads(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }
}

impl std::fmt::Debug for MemberTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemberTls({})", self.client.files().cert.display())
    }
}

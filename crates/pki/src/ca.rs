//! The cluster's certificate authority: a directory holding the CA's certificate and
//! key, its CRL and the register of what it issued (see the crate's header for the
//! layout). Issuing and revoking take the directory's lock, so several processes (the
//! nodes of a `cluster up`) may share one CA directory.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SanType,
    SerialNumber,
};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::files::{self, DirLock, MODE_PUBLIC, MODE_SECRET};
use crate::register::{Record, Register};
use crate::{Identity, PkiError, TlsFiles};

/// The CA's certificate (PEM) in its directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA's private key (PKCS#8 PEM, mode 0600).
pub const CA_KEY_FILE: &str = "ca.key";
/// The CA's current CRL (PEM), signed by the CA.
pub const CRL_FILE: &str = "crl.pem";
/// The register of issued certificates (JSON).
pub const REGISTER_FILE: &str = "issued.json";
/// The subdirectory where certificates are issued by default (`TlsFiles::issued`).
pub const ISSUED_DIR: &str = "issued";

/// How long a certificate is valid unless [`Ca::with_validity`] says otherwise: one year.
pub const VALIDITY_DEFAULT: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long the CA's own certificate is valid: ten years.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Certificates start this long before they are issued, so that a peer whose clock is a
/// little behind the CA's accepts a fresh one.
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// A CRL's nextUpdate, one year on. Informational: the verifiers do not enforce it (the
/// CRL changes only when something is revoked, and an old CRL must not lock a cluster out).
const CRL_NEXT_UPDATE: Duration = Duration::from_secs(365 * 24 * 3600);
/// Bytes of randomness in a serial (the first byte is kept in 0x40..=0x7f: positive
/// and without a leading zero, so it reads back exactly as written).
const SERIAL_LEN: usize = 16;

/// An open certificate authority.
#[derive(Debug)]
pub struct Ca {
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    validity: Duration,
}

/// A certificate just issued: who it names, its serial, and where its files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The identity in its SAN URI.
    pub identity: Identity,
    /// Lowercase hex, as `Ca::revoke` and `bourse pki revoke` take it.
    pub serial: String,
    /// When it expires.
    pub not_after: SystemTime,
    /// Its certificate and key, with the CA's certificate and CRL: what
    /// [`server_config`](crate::server_config) and [`client_config`](crate::client_config) take.
    pub files: TlsFiles,
}

/// One entry of the register, as [`Ca::list`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedInfo {
    /// Lowercase hex.
    pub serial: String,
    /// Who it names.
    pub identity: Identity,
    /// The DNS names and IP addresses in its SAN.
    pub hosts: Vec<String>,
    /// When it expires.
    pub not_after: SystemTime,
    /// When it was revoked, if it was.
    pub revoked_at: Option<SystemTime>,
}

impl IssuedInfo {
    /// Whether it is in the CRL.
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }
}

impl Ca {
    /// Creates a new CA in `dir` (created with mode 0700 if missing): a self-signed CA
    /// certificate, its key (mode 0600), an empty CRL and an empty register. Refuses a
    /// directory that already holds a CA's certificate or key.
    pub fn init(dir: &Path) -> Result<Ca, PkiError> {
        files::dir_create(dir)?;
        let _lock = DirLock::acquire(dir)?;
        Ca::init_locked(dir)
    }

    /// Opens the CA in `dir`, checking that its key is its certificate's.
    pub fn open(dir: &Path) -> Result<Ca, PkiError> {
        let cert_path = dir.join(CA_CERT_FILE);
        if !cert_path.exists() {
            return Err(PkiError::CaMissing { dir: dir.to_path_buf() });
        }
        let cert = CertificateDer::from_pem_file(&cert_path).map_err(|source| PkiError::Pem {
            path: cert_path.clone(),
            what: "a CA certificate",
            source,
        })?;
        let key_path = dir.join(CA_KEY_FILE);
        let key_pem = String::from_utf8_lossy(&files::read(&key_path)?).into_owned();
        let key = KeyPair::from_pem(&key_pem)?;
        let (_, parsed) = X509Certificate::from_der(&cert)
            .map_err(|e| PkiError::CertificateInvalid(format!("{}: {e}", cert_path.display())))?;
        if parsed.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(PkiError::CaKeyMismatch { dir: dir.to_path_buf() });
        }
        let issuer = Issuer::from_ca_cert_der(&cert, key)?;
        Ok(Ca { dir: dir.to_path_buf(), issuer, validity: VALIDITY_DEFAULT })
    }

    /// Opens the CA in `dir`, creating it first if there is none. Safe to call from
    /// several processes at once: exactly one creates it.
    pub fn open_or_init(dir: &Path) -> Result<Ca, PkiError> {
        files::dir_create(dir)?;
        let _lock = DirLock::acquire(dir)?;
        if dir.join(CA_CERT_FILE).exists() {
            Ca::open(dir)
        } else {
            Ca::init_locked(dir)
        }
    }

    /// The same CA, issuing certificates valid for `validity` (default one year).
    pub fn with_validity(mut self, validity: Duration) -> Ca {
        self.validity = validity;
        self
    }

    /// The CA's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Issues a certificate for `identity`, valid on `hosts` (each an IP address or a DNS
    /// name), into `out` (created if missing): `out/<role>-<id>.pem` and
    /// `out/<role>-<id>.key` (mode 0600), replacing any earlier ones of that identity
    /// (which stay valid until revoked or expired). The certificate has the identity's
    /// URI as SAN, the hosts as SAN DNS/IP, CN `<role> <id>`, extended key usages
    /// serverAuth and clientAuth, and a random serial; it is recorded in the register
    /// before its files are written.
    pub fn issue(&self, identity: &Identity, hosts: &[String], out: &Path) -> Result<Issued, PkiError> {
        identity.check()?;
        let mut sans = vec![SanType::URI(identity.uri().try_into()?)];
        for host in hosts {
            sans.push(san_of_host(host)?);
        }
        let now = OffsetDateTime::now_utc();
        let not_before = now - BACKDATE;
        let not_after = time_after(now, self.validity)?;
        let serial = serial_random()?;

        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, identity.to_string());
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        params.not_before = not_before;
        params.not_after = not_after;
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;

        files::dir_create(out)?;
        let _lock = DirLock::acquire(&self.dir)?;
        let register_path = self.dir.join(REGISTER_FILE);
        let mut register = Register::load(&register_path)?;
        let serial = hex(&serial);
        register.certificates.push(Record {
            serial: serial.clone(),
            identity: identity.clone(),
            hosts: hosts.to_vec(),
            not_before,
            not_after,
            revoked_at: None,
        });
        register.store(&register_path)?;
        let files = TlsFiles::in_dir(&self.dir, out, identity);
        files::write_atomic(&files.key, key.serialize_pem().as_bytes(), MODE_SECRET)?;
        files::write_atomic(&files.cert, cert.pem().as_bytes(), MODE_PUBLIC)?;
        Ok(Issued { identity: identity.clone(), serial, not_after: not_after.into(), files })
    }

    /// Revokes the certificate with `serial` (hex; colons and case are ignored): records
    /// it, then rewrites `crl.pem` atomically with a higher CRL number. Revoking an
    /// already revoked serial re-signs the CRL (repairing one a crash left behind).
    /// Configurations built before see the change only when rebuilt (see
    /// [`ReloadableServerConfig`](crate::ReloadableServerConfig)).
    pub fn revoke(&self, serial: &str) -> Result<(), PkiError> {
        let wanted = serial_normalize(serial);
        let _lock = DirLock::acquire(&self.dir)?;
        let register_path = self.dir.join(REGISTER_FILE);
        let mut register = Register::load(&register_path)?;
        let record = register
            .certificates
            .iter_mut()
            .find(|record| record.serial == wanted)
            .ok_or_else(|| PkiError::SerialUnknown(serial.to_string()))?;
        record.revoked_at.get_or_insert_with(OffsetDateTime::now_utc);
        register.crl_number += 1;
        // The register first: a crash before the CRL is written leaves the serial
        // recorded as revoked, and revoking it again writes the CRL.
        register.store(&register_path)?;
        self.crl_write(&register)
    }

    /// Every certificate issued, oldest first, with whether it is revoked.
    pub fn list(&self) -> Result<Vec<IssuedInfo>, PkiError> {
        let register = Register::load(&self.dir.join(REGISTER_FILE))?;
        Ok(register
            .certificates
            .into_iter()
            .map(|record| IssuedInfo {
                serial: record.serial,
                identity: record.identity,
                hosts: record.hosts,
                not_after: record.not_after.into(),
                revoked_at: record.revoked_at.map(SystemTime::from),
            })
            .collect())
    }

    /// `init` once `dir` exists and is locked.
    fn init_locked(dir: &Path) -> Result<Ca, PkiError> {
        for file in [CA_CERT_FILE, CA_KEY_FILE] {
            if dir.join(file).exists() {
                return Err(PkiError::CaExists { dir: dir.to_path_buf(), file });
            }
        }
        let now = OffsetDateTime::now_utc();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        // A random suffix tells two CAs apart by name as well as by key.
        let suffix = &hex(&serial_random()?)[..8];
        params.distinguished_name.push(DnType::OrganizationName, "Bourse");
        params.distinguished_name.push(DnType::CommonName, format!("Bourse cluster CA {suffix}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.serial_number = Some(SerialNumber::from_slice(&serial_random()?));
        params.not_before = now - BACKDATE;
        params.not_after = time_after(now, CA_VALIDITY)?;
        params.key_identifier_method = KeyIdMethod::Sha256;
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        files::write_atomic(&dir.join(CA_KEY_FILE), key.serialize_pem().as_bytes(), MODE_SECRET)?;
        let ca = Ca { dir: dir.to_path_buf(), issuer: Issuer::new(params, key), validity: VALIDITY_DEFAULT };
        let register = Register { crl_number: 1, certificates: Vec::new() };
        register.store(&dir.join(REGISTER_FILE))?;
        ca.crl_write(&register)?;
        // The certificate last: its presence is what says a CA is here.
        files::write_atomic(&dir.join(CA_CERT_FILE), cert.pem().as_bytes(), MODE_PUBLIC)?;
        Ok(ca)
    }

    /// Signs a CRL listing every revoked serial of `register`, numbered
    /// `register.crl_number`, and writes it to `crl.pem`.
    fn crl_write(&self, register: &Register) -> Result<(), PkiError> {
        let now = OffsetDateTime::now_utc();
        let mut revoked_certs = Vec::new();
        for record in &register.certificates {
            if let Some(revoked_at) = record.revoked_at {
                revoked_certs.push(RevokedCertParams {
                    serial_number: SerialNumber::from_slice(&unhex(&record.serial)?),
                    revocation_time: revoked_at,
                    reason_code: None,
                    invalidity_date: None,
                });
            }
        }
        let params = CertificateRevocationListParams {
            this_update: now,
            next_update: time_after(now, CRL_NEXT_UPDATE)?,
            crl_number: SerialNumber::from(register.crl_number),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let crl = params.signed_by(&self.issuer)?;
        files::write_atomic(&self.dir.join(CRL_FILE), crl.pem()?.as_bytes(), MODE_PUBLIC)
    }
}

/// A SAN for `host`: an IP address when it parses as one, else a DNS name (checked the
/// way a TLS client will check it).
fn san_of_host(host: &str) -> Result<SanType, PkiError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    let invalid = || PkiError::HostInvalid(host.to_string());
    ServerName::try_from(host).map_err(|_| invalid())?;
    Ok(SanType::DnsName(host.to_string().try_into().map_err(|_| invalid())?))
}

/// `now + validity`, refusing a zero or unrepresentable validity.
fn time_after(now: OffsetDateTime, validity: Duration) -> Result<OffsetDateTime, PkiError> {
    let invalid = || PkiError::ValidityInvalid(format!("{validity:?}"));
    if validity.is_zero() {
        return Err(invalid());
    }
    let validity = time::Duration::try_from(validity).map_err(|_| invalid())?;
    let end = now.checked_add(validity).ok_or_else(invalid)?;
    // X.509 times end at 9999-12-31.
    if end.year() > 9999 {
        return Err(invalid());
    }
    Ok(end)
}

/// A fresh random serial (see [`SERIAL_LEN`]).
fn serial_random() -> Result<[u8; SERIAL_LEN], PkiError> {
    let mut serial = [0u8; SERIAL_LEN];
    SystemRandom::new()
        .fill(&mut serial)
        .map_err(|_| PkiError::io("/dev/urandom", std::io::Error::other("no randomness")))?;
    serial[0] = (serial[0] & 0x3f) | 0x40;
    Ok(serial)
}

/// Lowercase hex without separators.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A serial as typed by a person (`4A:0b…` or `4a0b…`) in the register's form.
fn serial_normalize(serial: &str) -> String {
    serial.trim().chars().filter(|c| *c != ':').collect::<String>().to_ascii_lowercase()
}

/// Bytes of a register serial.
fn unhex(serial: &str) -> Result<Vec<u8>, PkiError> {
    let invalid = || PkiError::CertificateInvalid(format!("serial `{serial}` in the register is not hex"));
    if !serial.len().is_multiple_of(2) || serial.is_empty() {
        return Err(invalid());
    }
    (0..serial.len())
        .step_by(2)
        .map(|i| serial.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()).ok_or_else(invalid))
        .collect()
}

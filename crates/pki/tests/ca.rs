//! The CA's files and register: what `init`, `issue`, `revoke` and `list` write and
//! refuse, and how identities read back from certificates.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use bourse_pki::{identity_of, Ca, Identity, PkiError, Role, TlsFiles};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::revocation_list::CertificateRevocationList;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn cert_der(path: &Path) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(path).unwrap()
}

/// The CRL's number and revoked serials (lowercase hex).
fn crl(dir: &Path) -> (u64, Vec<String>) {
    let der = CertificateRevocationListDer::from_pem_file(dir.join("crl.pem")).unwrap();
    let (_, crl) = CertificateRevocationList::from_der(&der).unwrap();
    let number = crl.crl_number().unwrap().to_u64_digits().first().copied().unwrap_or(0);
    let serials = crl.iter_revoked_certificates().map(|r| format!("{:x}", r.user_certificate)).collect();
    (number, serials)
}

#[test]
fn init_writes_the_layout_and_refuses_a_second_time() {
    let dir = tempfile::tempdir().unwrap();
    let ca_dir = dir.path().join("ca");
    Ca::init(&ca_dir).unwrap();
    assert_eq!(mode(&ca_dir), 0o700);
    assert_eq!(mode(&ca_dir.join("ca.key")), 0o600);
    for file in ["ca.pem", "crl.pem", "issued.json"] {
        assert!(ca_dir.join(file).is_file(), "{file}");
    }
    assert_eq!(crl(&ca_dir), (1, vec![]));
    let e = Ca::init(&ca_dir).unwrap_err();
    assert!(matches!(e, PkiError::CaExists { .. }), "{e}");
    assert!(e.to_string().contains("already exists"), "{e}");
}

#[test]
fn open_needs_a_ca_and_open_or_init_makes_one_once() {
    let dir = tempfile::tempdir().unwrap();
    let e = Ca::open(dir.path()).unwrap_err();
    assert!(matches!(e, PkiError::CaMissing { .. }), "{e}");
    assert!(e.to_string().contains("bourse pki init"), "{e}");
    // Several processes of one `cluster up` may race to create it: one does.
    let ca_dir = dir.path().join("shared");
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| Ca::open_or_init(&ca_dir).unwrap());
        }
    });
    let first = std::fs::read(ca_dir.join("ca.pem")).unwrap();
    Ca::open_or_init(&ca_dir).unwrap();
    Ca::open(&ca_dir).unwrap();
    assert_eq!(std::fs::read(ca_dir.join("ca.pem")).unwrap(), first);
}

#[test]
fn open_refuses_a_key_that_is_not_the_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    Ca::init(&a).unwrap();
    Ca::init(&b).unwrap();
    std::fs::copy(b.join("ca.key"), a.join("ca.key")).unwrap();
    assert!(matches!(Ca::open(&a), Err(PkiError::CaKeyMismatch { .. })));
}

#[test]
fn issue_writes_a_certificate_naming_the_identity_and_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::init(dir.path()).unwrap().with_validity(std::time::Duration::from_secs(7 * 24 * 3600));
    let node = Identity::new(Role::Node, "n-1.a_b").unwrap();
    let hosts = ["10.0.0.7".to_string(), "::1".to_string(), "node1.example".to_string()];
    let out = dir.path().join("elsewhere");
    let issued = ca.issue(&node, &hosts, &out).unwrap();
    assert_eq!(issued.files.cert, out.join("node-n-1.a_b.pem"));
    assert_eq!(issued.files.key, out.join("node-n-1.a_b.key"));
    assert_eq!(issued.files.ca, dir.path().join("ca.pem"));
    assert_eq!(mode(&issued.files.key), 0o600);
    assert_eq!(TlsFiles::issued(dir.path(), &node).cert, dir.path().join("issued/node-n-1.a_b.pem"));

    let der = cert_der(&issued.files.cert);
    assert_eq!(identity_of(&der).unwrap(), node);
    assert_eq!(issued.files.identity().unwrap(), node);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    assert_eq!(format!("{:x}", cert.serial), issued.serial);
    assert_eq!(cert.subject().to_string(), "CN=node n-1.a_b");
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && eku.client_auth);
    assert!(!cert.is_ca());
    let sans = format!("{:?}", cert.subject_alternative_name().unwrap().unwrap().value.general_names);
    for expected in ["URI(\"bourse://node/n-1.a_b\")", "DNSName(\"node1.example\")", "IPAddress([10, 0, 0, 7])"] {
        assert!(sans.contains(expected), "{expected} not in {sans}");
    }
    let days = (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()) / 86_400;
    assert_eq!(days, 7, "a week (and the five minutes of backdating)");
    // Serials are random and distinct.
    let again = ca.issue(&node, &hosts, &out).unwrap();
    assert_ne!(again.serial, issued.serial);
    assert_eq!(issued.serial.len(), 32);
}

#[test]
fn identity_of_round_trips_every_role() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::init(dir.path()).unwrap();
    for role in Role::ALL {
        let identity = Identity::new(role, "x9").unwrap();
        let issued = ca.issue(&identity, &[], &dir.path().join("issued")).unwrap();
        assert_eq!(identity_of(&cert_der(&issued.files.cert)).unwrap(), identity);
        assert_eq!(issued.files.cert.file_name().unwrap().to_str().unwrap(), format!("{role}-x9.pem"));
    }
}

#[test]
fn identity_of_refuses_none_several_and_malformed() {
    let key = rcgen::KeyPair::generate().unwrap();
    let with = |sans: Vec<rcgen::SanType>| {
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = sans;
        params.self_signed(&key).unwrap().der().to_vec()
    };
    let uri = |s: &str| rcgen::SanType::URI(s.try_into().unwrap());
    let dns = rcgen::SanType::DnsName("a.example".try_into().unwrap());
    for (sans, why) in [
        (vec![], "no subject alternative names"),
        (vec![dns.clone()], "no identity URI"),
        (vec![uri("bourse://node/1"), uri("bourse://node/2")], "several URIs"),
        (vec![uri("bourse://king/1")], "malformed identity URI"),
        (vec![uri("bourse://node/a%2Fb")], "malformed identity URI"),
        (vec![uri("https://node/1"), dns], "malformed identity URI"),
    ] {
        let e = identity_of(&with(sans)).unwrap_err();
        assert!(e.to_string().contains(why), "{e} (expected {why})");
    }
    assert!(identity_of(b"not a certificate").is_err());
    assert_eq!(identity_of(&with(vec![uri("bourse://observer/web")])).unwrap().to_string(), "observer web");
}

#[test]
fn issue_refuses_a_bad_id_or_host_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::init(dir.path()).unwrap();
    let out = dir.path().join("issued");
    for id in ["", "a/b", "../x", "a b", &"x".repeat(65)] {
        let bad = Identity { role: Role::Node, id: id.to_string() };
        let e = ca.issue(&bad, &[], &out).unwrap_err();
        assert!(matches!(e, PkiError::IdInvalid(_)), "{id:?}: {e}");
    }
    let node = Identity::new(Role::Node, "1").unwrap();
    for host in ["", "a b", "under_score!"] {
        let e = ca.issue(&node, &[host.to_string()], &out).unwrap_err();
        assert!(matches!(e, PkiError::HostInvalid(_)), "{host:?}: {e}");
    }
    let e = Ca::open(dir.path()).unwrap().with_validity(std::time::Duration::ZERO).issue(&node, &[], &out).unwrap_err();
    assert!(matches!(e, PkiError::ValidityInvalid(_)), "{e}");
    assert!(ca.list().unwrap().is_empty());
    assert!(!out.exists());
}

#[test]
fn revoke_records_it_and_raises_the_crl_number() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::init(dir.path()).unwrap();
    let out = dir.path().join("issued");
    let one = ca.issue(&Identity::new(Role::Node, "1").unwrap(), &[], &out).unwrap();
    let two = ca.issue(&Identity::new(Role::Observer, "web").unwrap(), &[], &out).unwrap();
    let list = ca.list().unwrap();
    assert_eq!(list.iter().map(|i| i.serial.as_str()).collect::<Vec<_>>(), [&one.serial, &two.serial]);
    assert!(list.iter().all(|i| !i.is_revoked()));
    assert_eq!(list[0].not_after, one.not_after);

    // Colons and case, as other tools print serials, are accepted.
    let typed: String = two
        .serial
        .to_uppercase()
        .as_bytes()
        .chunks(2)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(":");
    ca.revoke(&typed).unwrap();
    assert_eq!(crl(dir.path()), (2, vec![two.serial.clone()]));
    let list = Ca::open(dir.path()).unwrap().list().unwrap();
    assert!(!list[0].is_revoked() && list[1].is_revoked());

    // Again: the CRL is re-signed with a higher number and still lists it once.
    ca.revoke(&two.serial).unwrap();
    assert_eq!(crl(dir.path()), (3, vec![two.serial.clone()]));
    ca.revoke(&one.serial).unwrap();
    let (number, mut serials) = crl(dir.path());
    serials.sort();
    let mut expected = vec![one.serial, two.serial];
    expected.sort();
    assert_eq!((number, serials), (4, expected));

    let e = ca.revoke("deadbeef").unwrap_err();
    assert!(matches!(e, PkiError::SerialUnknown(_)), "{e}");
}

//! PostgreSQL over TLS (`store::pg_tls`) against a throwaway server with TLS on
//! (`TempPostgres::start_tls`: its certificate names `127.0.0.1` and `localhost`):
//! `verify-full` with the right CA writes and reads a history over TLS; a CA other than
//! the server's is refused as a failed certificate verification; a host name the
//! certificate does not name is refused by `verify-full` and accepted by `verify-ca`;
//! `require` is refused before connecting; a client certificate is presented and seen
//! by the server. (Which URLs are refused without a server: `pg_tls`'s unit tests.)

use bourse_history::store::pg_tls::{Mode, PgConnect};
use bourse_history::store::Value;
use bourse_history::testing::{create_database, entry_rows, TempPostgres};
use bourse_history::{Progress, Store};

fn url(server: &TempPostgres, host: &str, database: &str, params: &str) -> String {
    format!("postgres://bourse@{host}:{}/{database}?{params}", server.port())
}

/// Whether the store's connection is TLS, and the client certificate's subject the
/// server saw ("" for none).
fn ssl_of(store: &mut Store) -> (String, String) {
    let rows = store
        .query("SELECT ssl::text, coalesce(client_dn, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
        .unwrap();
    match &rows[..] {
        [row] => match (&row[0], &row[1]) {
            (Value::Text(ssl), Value::Text(dn)) => (ssl.clone(), dn.clone()),
            other => panic!("pg_stat_ssl answered {other:?}"),
        },
        other => panic!("pg_stat_ssl answered {other:?}"),
    }
}

/// Writes entries 1..=5 and reads them back.
fn write_and_read(store: &mut Store) {
    let progress = Progress { applied_index: 5, applied_ts: 5_000, begins_at: 1 };
    store.write(&entry_rows(1, 5), &progress, None).unwrap();
    assert_eq!(store.saved().unwrap().map(|saved| saved.progress), Some(progress));
    let orders = store.query("SELECT count(*) FROM orders", &[]).unwrap();
    assert_eq!(orders, vec![vec![Value::Int(5)]]);
}

fn refused(url: &str) -> String {
    match Store::open(url) {
        Ok(store) => panic!("{url} was opened: {store:?}"),
        Err(e) => e.to_string(),
    }
}

/// One server for every case, each in a database of its own.
#[test]
fn postgres_certificate_verification() {
    let server = TempPostgres::start_tls().expect("start a temporary PostgreSQL with TLS");
    let tls = server.tls().expect("TLS files").clone();
    let root = format!("sslrootcert={}", tls.ca.display());

    // (1) verify-full to `localhost` and to `127.0.0.1` (both in the certificate): a
    // history is written (the store's four connections) and read over TLS.
    for (n, host) in ["localhost", "127.0.0.1"].into_iter().enumerate() {
        let database = format!("tls_full_{n}");
        let database_url =
            create_database(&url(&server, host, "postgres", &format!("sslmode=verify-full&{root}")), &database)
                .expect("create a database over TLS");
        assert_eq!(PgConnect::parse(&database_url).unwrap().mode(), Mode::VerifyFull);
        let mut store = Store::open(&database_url).unwrap();
        write_and_read(&mut store);
        assert_eq!(ssl_of(&mut store), ("true".to_string(), String::new()), "{host}: TLS, no client certificate");
    }
    // A root given without sslmode means verify-full, on a loopback host too.
    let mut store = Store::open(&url(&server, "localhost", "tls_full_0", &root)).unwrap();
    assert_eq!(ssl_of(&mut store).0, "true");
    // Plaintext to the same loopback server, as before.
    let mut store = Store::open(&url(&server, "127.0.0.1", "tls_full_0", "")).unwrap();
    assert_eq!(ssl_of(&mut store).0, "false");

    // (2) The root of another CA: the server's certificate fails verification.
    let other = tempfile::tempdir().unwrap();
    let other_ca = bourse_pki::Ca::init(&other.path().join("ca")).unwrap();
    let other_root = other_ca.dir().join(bourse_pki::CA_CERT_FILE);
    let error = refused(&url(
        &server,
        "localhost",
        "tls_full_0",
        &format!("sslmode=verify-full&sslrootcert={}", other_root.display()),
    ));
    assert!(error.contains("the server's certificate failed verification"), "{error}");
    assert!(error.contains("UnknownIssuer") && error.contains(&other_root.display().to_string()), "{error}");

    // (3) A host name the certificate does not name (the bytes go to 127.0.0.1 through
    // hostaddr; `host` is what is verified): verify-full refuses, verify-ca accepts.
    let elsewhere = |mode: &str| {
        format!(
            "postgres://bourse@db.bourse.invalid:{}/tls_full_0?hostaddr=127.0.0.1&sslmode={mode}&{root}",
            server.port()
        )
    };
    let error = refused(&elsewhere("verify-full"));
    assert!(error.contains("failed verification") && error.contains("not valid for name"), "{error}");
    let mut store = Store::open(&elsewhere("verify-ca")).expect("verify-ca ignores the host name");
    assert_eq!(ssl_of(&mut store).0, "true");
    // verify-ca still verifies the chain.
    let error =
        refused(&elsewhere("verify-ca").replace(&tls.ca.display().to_string(), &other_root.display().to_string()));
    assert!(error.contains("failed verification") && error.contains("UnknownIssuer"), "{error}");

    // (5) require: refused before connecting, pointing at verify-full.
    let error = refused(&url(&server, "localhost", "tls_full_0", "sslmode=require"));
    assert!(error.contains("sslmode=require does not verify") && error.contains("verify-full"), "{error}");

    // A client certificate of the server's CA is presented and seen by the server; one
    // of another CA is refused by it.
    let client = format!("sslcert={}&sslkey={}", tls.cert.display(), tls.key.display());
    let mut store = Store::open(&url(&server, "localhost", "tls_full_0", &format!("{root}&{client}"))).unwrap();
    let (ssl, dn) = ssl_of(&mut store);
    assert_eq!(ssl, "true");
    assert!(dn.contains("observer history"), "the server saw the client certificate {dn:?}");
    let identity = bourse_pki::Identity::new(bourse_pki::Role::Observer, "stranger").unwrap();
    let stranger = other_ca.issue(&identity, &[], &other.path().join("out")).unwrap();
    let client = format!("sslcert={}&sslkey={}", stranger.files.cert.display(), stranger.files.key.display());
    let error = refused(&url(&server, "localhost", "tls_full_0", &format!("{root}&{client}")));
    assert!(error.contains("TLS handshake failed") && error.contains("client certificate in sslcert="), "{error}");
}

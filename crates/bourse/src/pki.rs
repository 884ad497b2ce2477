//! `bourse pki …`: the cluster's certificate authority from the command line (issue 23).
//!
//! - `init --dir D`: a new CA in D (ca.pem, ca.key mode 0600, an empty crl.pem, issued.json).
//! - `issue --dir D --role R --id I [--host H …] [--days N] [--out O]`: a certificate and
//!   key for identity `R I` (`bourse://R/I`), valid on the hosts, written as
//!   `O/R-I.pem` and `O/R-I.key` (O defaults to `D/issued`, where `TlsFiles::issued`
//!   looks).
//! - `revoke --dir D --serial S`: S is added to D/crl.pem (rewritten, higher number);
//!   processes see it when they reload their TLS configuration.
//! - `list --dir D`: every certificate issued, with serial, identity, expiry and status.
//!
//! Output is for people; the global `--json` prints one JSON object per line. Every
//! refusal (unknown role, bad id or host, no CA, unknown serial) is the library's
//! sentence, printed as `bourse: …` with a failing exit status.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use bourse_pki::{Ca, Identity, IssuedInfo, Role, ISSUED_DIR};
use clap::{Args, Subcommand};
use serde_json::json;

#[derive(Subcommand, Debug)]
pub enum PkiCommand {
    /// Create a CA: DIR/ca.pem, DIR/ca.key (mode 0600), an empty DIR/crl.pem, DIR/issued.json.
    Init(DirArgs),
    /// Issue a certificate and key for a role and id, signed by the CA in DIR.
    Issue(IssueArgs),
    /// Revoke a certificate by serial: DIR/crl.pem is rewritten with it.
    Revoke(RevokeArgs),
    /// Every certificate the CA issued: serial, identity, expiry, revoked or not.
    List(DirArgs),
}

#[derive(Args, Debug)]
pub struct DirArgs {
    /// The CA's directory.
    #[arg(long)]
    dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct IssueArgs {
    /// The CA's directory.
    #[arg(long)]
    dir: PathBuf,
    /// What the holder is: node, gateway, operator or observer.
    #[arg(long)]
    role: Role,
    /// Which one: 1 to 64 characters of A-Z a-z 0-9 . _ -
    #[arg(long)]
    id: String,
    /// A host name or IP address the holder serves on (repeat, or separate with commas).
    #[arg(long = "host", value_delimiter = ',')]
    hosts: Vec<String>,
    /// Days the certificate is valid.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=36_500))]
    days: u32,
    /// Where to write ROLE-ID.pem and ROLE-ID.key (default: DIR/issued).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RevokeArgs {
    /// The CA's directory.
    #[arg(long)]
    dir: PathBuf,
    /// The certificate's serial, as `bourse pki list` shows it (colons and case ignored).
    #[arg(long)]
    serial: String,
}

pub fn run(command: PkiCommand, json: bool) -> Result<(), String> {
    match command {
        PkiCommand::Init(args) => init(args, json),
        PkiCommand::Issue(args) => issue(args, json),
        PkiCommand::Revoke(args) => revoke(args, json),
        PkiCommand::List(args) => list(args, json),
    }
    .map_err(|e| e.to_string())
}

fn init(args: DirArgs, json: bool) -> Result<(), bourse_pki::PkiError> {
    let ca = Ca::init(&args.dir)?;
    let dir = ca.dir().display();
    if json {
        println!("{}", json!({ "dir": dir.to_string(), "ca": format!("{dir}/{}", bourse_pki::CA_CERT_FILE) }));
    } else {
        println!("CA created in {dir}: ca.pem (certificate), ca.key (its key, mode 0600), crl.pem (empty)");
    }
    Ok(())
}

fn issue(args: IssueArgs, json: bool) -> Result<(), bourse_pki::PkiError> {
    let identity = Identity::new(args.role, args.id)?;
    let ca = Ca::open(&args.dir)?.with_validity(Duration::from_secs(u64::from(args.days) * 24 * 3600));
    let out = args.out.unwrap_or_else(|| args.dir.join(ISSUED_DIR));
    let issued = ca.issue(&identity, &args.hosts, &out)?;
    let not_after = rfc3339(issued.not_after);
    if json {
        let line = json!({
            "identity": issued.identity.to_string(),
            "uri": issued.identity.uri(),
            "serial": issued.serial,
            "not_after": not_after,
            "cert": issued.files.cert,
            "key": issued.files.key,
        });
        println!("{line}");
    } else {
        println!(
            "issued {} ({}), serial {}, valid until {not_after}",
            issued.identity,
            issued.identity.uri(),
            issued.serial
        );
        println!("  certificate {}", issued.files.cert.display());
        println!("  key         {}", issued.files.key.display());
    }
    Ok(())
}

fn revoke(args: RevokeArgs, json: bool) -> Result<(), bourse_pki::PkiError> {
    let ca = Ca::open(&args.dir)?;
    ca.revoke(&args.serial)?;
    let crl = args.dir.join(bourse_pki::CRL_FILE);
    if json {
        println!("{}", json!({ "revoked": args.serial, "crl": crl }));
    } else {
        println!("revoked {}; {} rewritten (processes see it when they reload)", args.serial, crl.display());
    }
    Ok(())
}

fn list(args: DirArgs, json: bool) -> Result<(), bourse_pki::PkiError> {
    let issued = Ca::open(&args.dir)?.list()?;
    let now = SystemTime::now();
    if json {
        for info in &issued {
            let line = json!({
                "serial": info.serial,
                "identity": info.identity.to_string(),
                "role": info.identity.role.to_string(),
                "id": info.identity.id,
                "hosts": info.hosts,
                "not_after": rfc3339(info.not_after),
                "status": status(info, now),
                "revoked_at": info.revoked_at.map(rfc3339),
            });
            println!("{line}");
        }
        return Ok(());
    }
    println!("{:<32}  {:<24}  {:<20}  {:<8}  HOSTS", "SERIAL", "IDENTITY", "NOT AFTER", "STATUS");
    for info in &issued {
        let identity = info.identity.to_string();
        let hosts = info.hosts.join(",");
        println!(
            "{:<32}  {identity:<24}  {:<20}  {:<8}  {hosts}",
            info.serial,
            rfc3339(info.not_after),
            status(info, now)
        );
    }
    Ok(())
}

/// `revoked`, `expired` or `valid`.
fn status(info: &IssuedInfo, now: SystemTime) -> &'static str {
    if info.is_revoked() {
        "revoked"
    } else if info.not_after <= now {
        "expired"
    } else {
        "valid"
    }
}

/// `2027-05-01T12:00:00Z`, to the second.
fn rfc3339(time: SystemTime) -> String {
    let time = time::OffsetDateTime::from(time).replace_nanosecond(0).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    time.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| format!("{time}"))
}

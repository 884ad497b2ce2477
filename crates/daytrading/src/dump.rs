//! `DUMPLOG` (spec 8.2): once the command is committed, wait until the history store has
//! written its log entry, then stream the audit document from the store — the global
//! form into `dump_dir/NAME` (a temporary file, fsynced, then renamed), the user form
//! into the response.
//!
//! Both hold every record up to and including the command's own `userCommand` (its
//! audit sequence number is in the result), one user's restricted to that user's
//! records. A failure (no history store configured, the store not catching up within
//! `dump_wait`, a write error) turns the response's result into `dump failed`: the
//! command itself is already in the log, so the audit log cannot say so.

use std::path::Path;
use std::time::{Duration, Instant};

use bourse_engine::daytrading::{filename_check, DtError};
use bourse_history::audit::{dump, DumpScope};
use bourse_history::Store;
use bourse_protocol::proto;

use crate::service::{Call, ServiceConfig};

/// Runs the dump of a committed `DUMPLOG` and fills in `response`.
pub async fn complete(
    config: &ServiceConfig,
    call: &Call,
    mut response: proto::DayTradingResponse,
) -> proto::DayTradingResponse {
    let config = config.clone();
    let call = call.clone();
    let log_index = response.log_index;
    let through = response.result.as_ref().map_or(0, |r| r.audit_seq);
    let outcome = tokio::task::spawn_blocking(move || run(&config, &call, log_index, through))
        .await
        .unwrap_or_else(|e| Err(format!("dump task: {e}")));
    match outcome {
        Ok(written) => response.dump = Some(written),
        Err(error) => {
            tracing::error!(%error, "DUMPLOG failed");
            if let Some(result) = &mut response.result {
                result.error = DtError::DumpFailed.message().to_owned();
                result.error_code = u32::from(DtError::DumpFailed.code());
            }
        }
    }
    response
}

fn run(config: &ServiceConfig, call: &Call, log_index: u64, through_seq: u64) -> Result<proto::DayTradingDump, String> {
    let url = config.history.as_deref().ok_or("no history store is configured (--dt-history)")?;
    let mut store = Store::open(url).map_err(|e| format!("history store {url}: {e}"))?;
    wait_for(&mut store, log_index, config.dump_wait)?;
    let server = &config.log_server_name;
    if call.args.len() == 1 {
        let name = filename_check(&call.args[0]).ok_or("invalid file name")?;
        let (records, bytes) = write_file(&mut store, &config.dump_dir, name, server, through_seq)?;
        Ok(proto::DayTradingDump { filename: name.to_owned(), records, bytes, document: Vec::new() })
    } else {
        let user = call.args.first().ok_or("no user")?;
        let mut document = Vec::new();
        let scope = DumpScope { user: Some(user), through_seq };
        let stats = dump(&mut store, scope, server, &mut document).map_err(|e| e.to_string())?;
        let filename = call.args.get(1).cloned().unwrap_or_default();
        Ok(proto::DayTradingDump { filename, records: stats.records, bytes: stats.bytes, document })
    }
}

/// Waits until the store has written entry `log_index`.
fn wait_for(store: &mut Store, log_index: u64, patience: Duration) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let written = store.saved().map_err(|e| e.to_string())?.map_or(0, |s| s.progress.applied_index);
        if written >= log_index {
            return Ok(());
        }
        if started.elapsed() > patience {
            return Err(format!("the history store wrote up to entry {written}, not {log_index}, within {patience:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Streams the whole log into `dir/name` through a temporary file and a rename.
fn write_file(store: &mut Store, dir: &Path, name: &str, server: &str, through_seq: u64) -> Result<(u64, u64), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(name);
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let file = std::fs::File::create(&temporary).map_err(|e| format!("{}: {e}", temporary.display()))?;
    let mut writer = std::io::BufWriter::with_capacity(1 << 20, file);
    let scope = DumpScope { user: None, through_seq };
    let stats = match dump(store, scope, server, &mut writer) {
        Ok(stats) => stats,
        Err(error) => {
            let _ = std::fs::remove_file(&temporary);
            return Err(error.to_string());
        }
    };
    let file = writer.into_inner().map_err(|e| e.to_string())?;
    file.sync_all().map_err(|e| e.to_string())?;
    std::fs::rename(&temporary, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Ok(directory) = std::fs::File::open(dir) {
        let _ = directory.sync_all();
    }
    Ok((stats.records, stats.bytes))
}

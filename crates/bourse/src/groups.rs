//! The partitioned exchange as processes (issue 28): `bourse group` runs one member of
//! one group, `bourse cluster up --groups G` starts G groups of `--nodes` members each,
//! and `bourse group-load` trades on them and checks what they did (`bourse_group`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_group::client::GroupClient;
use bourse_group::load::LoadOptions;
use bourse_group::member::{GroupConfig, GroupMember};
use bourse_group::Genesis;
use clap::Args;
use serde_json::json;

/// Flags of `bourse group`.
#[derive(Args, Debug)]
pub struct GroupArgs {
    /// This member's group (0 to G-1 of the genesis's G).
    #[arg(long)]
    group: usize,
    /// This member's id, unique across every group.
    #[arg(long)]
    id: u64,
    /// Holds the member's Raft log and snapshots.
    #[arg(long)]
    data: PathBuf,
    /// The group API (clients, and the members of other groups reading its outputs).
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long)]
    raft_listen: SocketAddr,
    /// Source address for Raft connections to the other members.
    #[arg(long)]
    bind_ip: Option<std::net::IpAddr>,
    /// This group's members, id=api/raft, comma separated; the first bootstraps it.
    #[arg(long, value_delimiter = ',', required = true)]
    members: Vec<String>,
    /// Every group's members' API addresses: groups separated by `;`, addresses by `,`,
    /// in group order.
    #[arg(long)]
    directory: String,
    /// The catalog and opening accounts every member builds alike (JSON, as
    /// `cluster up --groups` writes it).
    #[arg(long)]
    genesis: PathBuf,
    /// Heartbeat 5 ms, election timeout 10–35 ms instead of 20 ms and 40–100 ms.
    #[arg(long)]
    low_latency: bool,
    #[arg(long, default_value_t = 10_000)]
    snapshot_every_entries: u64,
}

fn directory(text: &str) -> Vec<Vec<String>> {
    text.split(';').map(|group| group.split(',').map(str::trim).map(String::from).collect()).collect()
}

/// `bourse group`: runs the member until SIGINT or SIGTERM; SIGHUP re-reads its
/// certificates.
pub fn member(args: GroupArgs, target: &crate::cli::Target) -> Result<(), String> {
    let members = args
        .members
        .iter()
        .map(|m| {
            let (id, api, raft) = bourse_node::config::parse_member(m).map_err(|e| e.to_string())?;
            Ok((id, bourse_cluster::Peer { api, raft }))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let (heartbeat_ms, election_min_ms, election_max_ms) = if args.low_latency { (5, 10, 35) } else { (20, 40, 100) };
    let config = GroupConfig {
        group: args.group,
        id: args.id,
        dir: args.data,
        listen: args.listen,
        raft_listen: args.raft_listen,
        bind_ip: args.bind_ip,
        members,
        directory: directory(&args.directory),
        genesis: Genesis::read(&args.genesis)?,
        pki: target.pki.clone(),
        heartbeat_ms,
        election_min_ms,
        election_max_ms,
        snapshot_every_entries: args.snapshot_every_entries,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let reloads = config.pki.is_some();
        let (group, id) = (config.group, config.id);
        let member = GroupMember::start(config).await?;
        let mut signals = crate::history::Signals::install_hangup(reloads)?;
        println!("bourse group {group} member {id}: group API on {}", member.api);
        loop {
            let name = signals.recv().await;
            if name == "SIGHUP" && reloads {
                match member.reload_tls() {
                    Ok(()) => tracing::info!("SIGHUP: the certificates and the CRL reloaded"),
                    Err(error) => tracing::error!(%error, "SIGHUP: reload failed; the previous ones stay"),
                }
                continue;
            }
            tracing::info!("{name}: shutting down");
            break;
        }
        member.shutdown().await;
        Ok(())
    })
}

/// The accounts of `cluster up --groups`'s market.
const GENESIS_ACCOUNTS: u32 = 64;

/// A member's id, from its group and its place in it (1-based): unique across groups.
fn member_id(group: usize, index: u64) -> u64 {
    group as u64 * 10 + index
}

/// What `cluster up --groups` records of one member, and how to start it again.
struct Planned {
    group: usize,
    id: u64,
    api: String,
    raft: String,
    dir: PathBuf,
}

fn spawn(exe: &Path, member: &Planned, common: &[String]) -> Result<std::process::Child, String> {
    crate::cluster::detached(exe, &member.dir)?
        .args(["group", "--group", &member.group.to_string(), "--id", &member.id.to_string(), "--data"])
        .arg(&member.dir)
        .args(["--listen", &member.api, "--raft-listen", &member.raft])
        .args(common)
        .spawn()
        .map_err(|e| format!("starting member {}: {e}", member.id))
}

/// The flags every member of `group` gets besides its own.
fn common_args(record: &serde_json::Value, group: usize) -> Vec<String> {
    let mut args: Vec<String> =
        record["member_args"].as_array().into_iter().flatten().filter_map(|a| a.as_str().map(String::from)).collect();
    if let Some(members) = record["group_members"][group].as_str() {
        args.extend(["--members".to_string(), members.to_string()]);
    }
    args
}

/// What `cluster up --groups G [--meta-group]` starts: G data groups, and a meta group
/// as group 0 before them when asked for.
pub struct Shape {
    pub data_groups: u32,
    pub meta_group: bool,
}

/// `bourse cluster up --groups G --nodes N`.
pub async fn up(
    shape: Shape,
    nodes: u64,
    data: &Path,
    base_port: u16,
    options: &crate::cluster::UpOptions,
    as_json: bool,
) -> Result<(), String> {
    let (plaintext, low_latency) = (options.plaintext, options.low_latency);
    if !(1..=9).contains(&nodes) {
        return Err("--nodes must be between 1 and 9".into());
    }
    if !(1..=32).contains(&shape.data_groups) {
        return Err("--groups must be between 1 and 32".into());
    }
    let groups = shape.data_groups + u32::from(shape.meta_group);
    let record_path = data.join("cluster.json");
    if record_path.exists() {
        return Err(format!(
            "{} exists: a cluster was started there (stop it with `bourse cluster down --data {}`, or remove \
             the directory for a new one)",
            record_path.display(),
            data.display()
        ));
    }
    std::fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let data = std::path::absolute(data).map_err(|e| e.to_string())?;
    let mut genesis = Genesis::market(groups, 4, GENESIS_ACCOUNTS);
    if shape.meta_group {
        genesis = genesis.with_meta_group();
    }
    let genesis_path = data.join("genesis.json");
    genesis.write(&genesis_path)?;
    let planned: Vec<Planned> = (0..groups as usize)
        .flat_map(|group| {
            let data = data.clone();
            (1..=nodes).map(move |index| {
                let id = member_id(group, index);
                Planned {
                    group,
                    id,
                    api: format!("127.0.0.1:{}", u64::from(base_port) + id),
                    raft: format!("127.0.0.1:{}", u64::from(base_port) + 1_000 + id),
                    dir: data.join(format!("group{group}")).join(format!("node{id}")),
                }
            })
        })
        .collect();
    let of_group = |g: usize| planned.iter().filter(move |p| p.group == g);
    let group_members: Vec<String> = (0..groups as usize)
        .map(|g| of_group(g).map(|p| format!("{}={}/{}", p.id, p.api, p.raft)).collect::<Vec<_>>().join(","))
        .collect();
    let directory: Vec<Vec<String>> =
        (0..groups as usize).map(|g| of_group(g).map(|p| p.api.clone()).collect()).collect();
    let directory_text = directory.iter().map(|g| g.join(",")).collect::<Vec<_>>().join(";");
    let mut member_args =
        vec!["--directory".to_string(), directory_text, "--genesis".to_string(), genesis_path.display().to_string()];
    if low_latency {
        member_args.push("--low-latency".into());
    }
    member_args.extend(options.node_args.iter().filter(|a| !a.is_empty()).cloned());
    let pki = if plaintext {
        None
    } else {
        let ids: Vec<u64> = planned.iter().map(|p| p.id).collect();
        let pki = crate::cluster::member_certificates(&data.join("pki"), ids, &["127.0.0.1".to_string()])?;
        crate::cluster::client_certificates(&pki, &["operator:admin", "observer:history"])?;
        member_args.extend(["--pki".to_string(), pki.display().to_string()]);
        Some(pki)
    };
    let mut record = json!({
        "groups": groups,
        "genesis": genesis_path,
        "directory": directory,
        "group_members": group_members,
        "member_args": member_args,
        "nodes": [],
    });
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut started = Vec::new();
    for member in &planned {
        let child = spawn(&exe, member, &common_args(&record, member.group))?;
        started.push(json!({
            "group": member.group, "id": member.id, "pid": child.id(),
            "api": member.api, "raft": member.raft, "data": member.dir,
        }));
    }
    record["nodes"] = json!(started);
    std::fs::write(&record_path, serde_json::to_string_pretty(&record).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let client = GroupClient::new(directory.clone(), genesis.map(), operator_tls(pki.as_deref())?);
    let leaders = wait_for_leaders(&client, groups as usize, Duration::from_secs(30))
        .await
        .map_err(|e| format!("{e}; see {}/group*/node*/node.log", data.display()))?;
    if as_json {
        println!("{}", json!({ "nodes": started, "leaders": leaders, "directory": directory }));
    } else {
        for member in &planned {
            println!("group {} member {} api {} raft {}", member.group, member.id, member.api, member.raft);
        }
        for (g, leader) in leaders.iter().enumerate() {
            let meta =
                if genesis.map().holds_data(g) { "" } else { " (the meta group: catalog, placement, moves, cuts)" };
            println!("group {g}: leader member {leader}{meta}");
        }
        println!(
            "the market: {} (USD and stocks S0-S3, listed S0/USD-S3/USD; accounts 0-63 funded)",
            genesis_path.display()
        );
        if let Some(pki) = &pki {
            println!("mutual TLS: certificates in {} (every member, operator:admin, observer:history)", pki.display());
        }
        println!("trade and check: bourse group-load --data {}", data.display());
        println!("stop with: bourse cluster down --data {}", data.display());
    }
    Ok(())
}

fn operator_tls(pki: Option<&Path>) -> Result<Option<Arc<bourse_pki::ReloadableClientConfig>>, String> {
    let Some(pki) = pki else { return Ok(None) };
    let identity = crate::cli::parse_identity("operator:admin")?;
    let files = bourse_pki::TlsFiles::issued(pki, &identity);
    Ok(Some(Arc::new(bourse_pki::ReloadableClientConfig::client(files).map_err(|e| e.to_string())?)))
}

/// Each group's leader, once every group has one.
async fn wait_for_leaders(client: &GroupClient, groups: usize, within: Duration) -> Result<Vec<u64>, String> {
    let deadline = Instant::now() + within;
    loop {
        let mut leaders = vec![None; groups];
        for state in client.states(false).await.into_iter().flatten() {
            if state.leading {
                leaders[state.group] = Some(state.node);
            }
        }
        if leaders.iter().all(Option::is_some) {
            return Ok(leaders.into_iter().flatten().collect());
        }
        if Instant::now() > deadline {
            let missing: Vec<usize> = (0..groups).filter(|&g| leaders[g].is_none()).collect();
            return Err(format!("groups {missing:?} have no leader after {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The record of the groups `cluster up --groups` started in `data`, and the operator's
/// TLS for them (none in plaintext).
fn running_groups(data: &Path) -> Result<(serde_json::Value, Option<Arc<bourse_pki::ReloadableClientConfig>>), String> {
    let record = read_record(data)?;
    if record.get("groups").is_none() {
        return Err(format!("{}: not groups started by `cluster up --groups`", data.display()));
    }
    Ok((record, operator_tls(record_pki(data).as_deref())?))
}

fn read_record(data: &Path) -> Result<serde_json::Value, String> {
    let path = data.join("cluster.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether `data` holds groups started by `cluster up --groups`.
pub fn is_groups(data: &Path) -> bool {
    read_record(data).is_ok_and(|record| record.get("groups").is_some())
}

fn record_directory(record: &serde_json::Value) -> Vec<Vec<String>> {
    record["directory"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| g.as_array().into_iter().flatten().filter_map(|a| a.as_str().map(String::from)).collect())
        .collect()
}

/// Where the recorded groups' accounts and books live: the map of the genesis they
/// started from.
fn record_map(record: &serde_json::Value) -> Result<bourse_shard::ShardMap, String> {
    let path = record["genesis"].as_str().ok_or("no genesis in the groups' record")?;
    Ok(Genesis::read(Path::new(path))?.map())
}

/// A client of the recorded groups.
fn record_client(
    record: &serde_json::Value,
    tls: Option<Arc<bourse_pki::ReloadableClientConfig>>,
) -> Result<GroupClient, String> {
    let directory = record_directory(record);
    let map = record_map(record)?;
    if map.groups() != directory.len() {
        return Err(format!("the genesis has {} groups, the record's directory {}", map.groups(), directory.len()));
    }
    Ok(GroupClient::new(directory, map, tls))
}

fn record_pki(data: &Path) -> Option<PathBuf> {
    let pki = data.join("pki");
    pki.join(bourse_pki::CA_CERT_FILE).exists().then_some(pki)
}

/// `cluster restart --id N` for a member of the groups.
pub fn restart(data: &Path, id: u64) -> Result<(), String> {
    let mut record = read_record(data)?;
    let nodes = record["nodes"].as_array().ok_or("no nodes in the record")?;
    let entry = nodes.iter().find(|n| n["id"].as_u64() == Some(id)).ok_or_else(|| format!("no member {id}"))?;
    let pid = entry["pid"].as_u64().unwrap_or(0);
    if pid != 0 && Path::new(&format!("/proc/{pid}")).exists() && !crate::cluster::is_zombie(pid as u32) {
        return Err(format!("member {id} (pid {pid}) is still running"));
    }
    let member = Planned {
        group: entry["group"].as_u64().unwrap_or(0) as usize,
        id,
        api: entry["api"].as_str().unwrap_or_default().into(),
        raft: entry["raft"].as_str().unwrap_or_default().into(),
        dir: PathBuf::from(entry["data"].as_str().unwrap_or_default()),
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let child = spawn(&exe, &member, &common_args(&record, member.group))?;
    if let Some(entry) =
        record["nodes"].as_array_mut().and_then(|nodes| nodes.iter_mut().find(|n| n["id"].as_u64() == Some(id)))
    {
        entry["pid"] = json!(child.id());
    }
    println!("member {id} of group {} started again: pid {} api {}", member.group, child.id(), member.api);
    let path = data.join("cluster.json");
    std::fs::write(&path, serde_json::to_string_pretty(&record).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

/// `cluster status --data DIR` for groups: each member's group, role, term and
/// progress.
pub async fn status(data: &Path, as_json: bool) -> Result<(), String> {
    let record = read_record(data)?;
    let client = record_client(&record, operator_tls(record_pki(data).as_deref())?)?;
    let mut down = 0;
    for (n, state) in client.states(false).await.into_iter().enumerate() {
        match state {
            Ok(state) if as_json => println!(
                "{}",
                json!({ "group": state.group, "id": state.node, "leading": state.leading, "term": state.term,
                        "applied": state.applied, "committed": state.committed })
            ),
            Ok(state) => println!(
                "group {} member {}: {} term {} applied {} committed {}",
                state.group,
                state.node,
                if state.leading { "leader" } else { "follower" },
                state.term,
                state.applied,
                state.committed
            ),
            Err(error) => {
                down += 1;
                eprintln!("member {n}: {error}");
            }
        }
    }
    if down > 0 {
        return Err(format!("{down} members did not answer"));
    }
    Ok(())
}

/// Flags of `bourse group-load`.
#[derive(Args, Debug)]
pub struct GroupLoadArgs {
    /// The directory of `cluster up --groups`.
    #[arg(long)]
    data: PathBuf,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Traders, each a client of its own with one command outstanding; trader N trades
    /// account N of the genesis (modulo its accounts, several traders sharing one past
    /// that).
    #[arg(long, default_value_t = 16)]
    traders: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long the groups may take to settle after the traders stop.
    #[arg(long, default_value_t = 60)]
    settle_secs: u64,
    /// Accounts to create on the running groups (through group 0, which orders catalog
    /// and account commands for every group) and fund before trading; the first traders
    /// trade them.
    #[arg(long, default_value_t = 0)]
    online_accounts: usize,
    /// Move a symbol's book to another group while the traders trade: SYMBOL:GROUP.
    #[arg(long = "move", value_name = "SYMBOL:GROUP")]
    move_book: Option<String>,
    /// When to move it, in seconds after the traders start (default: half way).
    #[arg(long)]
    move_after: Option<f64>,
    /// Close the trading day this many seconds after the traders start, while they
    /// trade (every Day order placed before it expires, in every group).
    #[arg(long, value_name = "SECS")]
    close_day_after: Option<f64>,
}

/// `bourse group-load`: traders on the groups, then the checks; fails on any violation.
pub fn load(args: GroupLoadArgs, as_json: bool) -> Result<(), String> {
    let (record, tls) = running_groups(&args.data)?;
    let genesis = Genesis::read(Path::new(record["genesis"].as_str().unwrap_or_default()))?;
    let built = genesis.build()?;
    let symbols =
        genesis.commands.iter().filter(|c| matches!(c, bourse_engine::command::CommandBody::CreateSymbol(_))).count();
    let options = LoadOptions {
        directory: record_directory(&record),
        map: genesis.map(),
        accounts: built.accounts,
        traders: args.traders,
        symbols: symbols as u32,
        seconds: args.seconds,
        seed: args.seed,
        settle_within: Duration::from_secs(args.settle_secs),
        online_accounts: args.online_accounts,
        move_book: match &args.move_book {
            None => None,
            Some(spec) => {
                let parsed = spec.split_once(':').and_then(|(s, g)| Some((s.parse::<u32>().ok()?, g.parse().ok()?)));
                let (symbol, to) = parsed.ok_or_else(|| format!("--move {spec}: give SYMBOL:GROUP, such as 1:0"))?;
                let after = args.move_after.unwrap_or(args.seconds / 2.0);
                if !(0.0..=args.seconds).contains(&after) {
                    return Err(format!("--move-after {after}: within the run's {} seconds", args.seconds));
                }
                Some((bourse_engine::SymbolId(symbol), to, Duration::from_secs_f64(after)))
            }
        },
        close_day_after: match args.close_day_after {
            Some(after) if !(0.0..=args.seconds).contains(&after) => {
                return Err(format!("--close-day-after {after}: within the run's {} seconds", args.seconds));
            }
            after => after.map(Duration::from_secs_f64),
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let traders = options.traders;
    let pids: Vec<u32> = record["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["pid"].as_u64().map(|pid| pid as u32))
        .collect();
    let cpu_before = members_cpu(&pids);
    let report = runtime.block_on(bourse_group::load::run(options, tls));
    // The members' CPU over the trading and the settling after it.
    let cpu = members_cpu(&pids).saturating_sub(cpu_before);
    let cpu_us = cpu.as_secs_f64() * 1e6 / (report.commands.max(1) as f64);
    let rate = report.commands as f64 / report.elapsed.as_secs_f64().max(1e-9);
    if as_json {
        println!(
            "{}",
            json!({
                "traders": traders, "commands": report.commands, "placed": report.placed,
                "per_second": rate, "resends": report.resends, "repeats": report.repeats,
                "members_cpu_us_per_command": cpu_us, "p50_ms": report.p50_ms, "p99_ms": report.p99_ms,
                "applied": report.applied, "settled_ms": report.settled_in.as_millis() as u64,
                "created_accounts": report.created.iter().map(|a| a.0).collect::<Vec<_>>(),
                "moved": report.moved.as_ref().map(|m| json!({
                    "symbol": m.symbol, "from": m.from, "to": m.to, "took_ms": m.took_ms,
                    "orders_during": m.orders_during, "pause_ms": m.pause_ms,
                    "orders_else": m.orders_else, "else_p50_ms": m.else_p50_ms, "else_p99_ms": m.else_p99_ms,
                    "neighbours_during": m.neighbours_during, "neighbours_pause_ms": m.neighbours_pause_ms,
                })),
                "closed": report.closed.as_ref().map(|c| json!({
                    "expired": c.expired, "took_ms": c.took_ms, "refused_moving": c.refused_moving,
                })),
                "create_ms": report.create_ms, "read_back": report.read_back, "forgotten": report.forgotten,
                "read_at_once": report.read_at_once, "watched_reads": report.watched_reads,
                "violations": report.violations,
            })
        );
    } else {
        if !report.created.is_empty() {
            let ids: Vec<u32> = report.created.iter().map(|a| a.0).collect();
            println!(
                "{} accounts created and funded on the running groups in {:.0} ms: {ids:?}",
                ids.len(),
                report.create_ms
            );
        }
        println!(
            "{traders} traders, {:.1} s: {} commands answered ({rate:.0}/s), {} orders placed, {} resends, {} answered \
             from a session's memory",
            report.elapsed.as_secs_f64(),
            report.commands,
            report.placed,
            report.resends,
            report.repeats
        );
        println!(
            "answer p50 {:.2} ms, p99 {:.2} ms; the members' CPU {cpu_us:.0} µs per command; settled in {} ms; \
             entries applied per group {:?}",
            report.p50_ms,
            report.p99_ms,
            report.settled_in.as_millis(),
            report.applied
        );
        if let Some(m) = &report.moved {
            println!(
                "symbol {}'s book moved from group {} to group {} in {:.1} ms; its {} orders awaited meanwhile waited \
                 {:.1} ms at most, its {} others p50 {:.2} ms, p99 {:.2} ms; {} orders of group {}'s other books \
                 awaited meanwhile waited {:.1} ms at most",
                m.symbol,
                m.from.map_or("?".to_string(), |g| g.to_string()),
                m.to,
                m.took_ms,
                m.orders_during,
                m.pause_ms,
                m.orders_else,
                m.else_p50_ms,
                m.else_p99_ms,
                m.neighbours_during,
                m.to,
                m.neighbours_pause_ms
            );
            println!(
                "an order of its own resting in the moving book read {} times, by id and in the book, through the \
                 move",
                report.watched_reads
            );
        }
        if let Some(c) = &report.closed {
            println!(
                "the day closed under load in {:.1} ms: {} Day orders expired across the groups{}",
                c.took_ms,
                c.expired,
                match c.refused_moving {
                    0 => String::new(),
                    1 => " (refused once while a book moved, then sent again)".to_string(),
                    n => format!(" (refused {n} times while a book moved, then sent again)"),
                }
            );
        }
        if report.violations.is_empty() {
            println!(
                "checks held: every group's members in one state, every group with the same catalog and accounts, \
                 every asset conserved across the groups, every acknowledged command in its session's record on \
                 every member, {} orders of the moving book read by id as soon as acknowledged, {} orders sampled over each book's run \
                 read back by id as the group holding each has it ({} more forgotten)",
                report.read_at_once, report.read_back, report.forgotten
            );
        }
    }
    if report.violations.is_empty() {
        Ok(())
    } else {
        for violation in &report.violations {
            eprintln!("violation: {violation}");
        }
        Err(format!("{} checks failed", report.violations.len()))
    }
}

/// User and system CPU of the processes `pids` that are alive (Linux `/proc`).
fn members_cpu(pids: &[u32]) -> Duration {
    let ticks: u64 = pids
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// Flags of `bourse group-query`.
#[derive(Args, Debug)]
pub struct GroupQueryArgs {
    /// The directory of `cluster up --groups`.
    #[arg(long)]
    data: PathBuf,
    #[command(subcommand)]
    query: GroupQuery,
}

/// What to read of the groups (each answered by its group's leader after a read index).
#[derive(clap::Subcommand, Debug)]
pub enum GroupQuery {
    /// A symbol's book, from the symbol's group.
    Book {
        #[arg(long)]
        symbol: u32,
        /// Price levels a side.
        #[arg(long, default_value_t = 5)]
        levels: u32,
    },
    /// An order: from its symbol's group, or from the group it closed in when its book
    /// has moved since.
    Order {
        #[arg(long)]
        symbol: u32,
        #[arg(long)]
        order: u64,
    },
    /// An account: its available balances from its own group, what its orders reserve
    /// from every group (each read at its own group's index), and its open orders.
    Account {
        #[arg(long)]
        account: u32,
    },
}

/// `bourse group-query`: reads books, orders and accounts of running groups.
pub fn query(args: GroupQueryArgs, as_json: bool) -> Result<(), String> {
    use bourse_engine::{AccountId, OrderId, SymbolId};
    use bourse_group::wire::{Answered, Query};
    let (record, tls) = running_groups(&args.data)?;
    let query = match args.query {
        GroupQuery::Book { symbol, levels } => Query::Book { symbol: SymbolId(symbol), levels },
        GroupQuery::Order { symbol, order } => Query::Order { symbol: SymbolId(symbol), order: OrderId(order) },
        GroupQuery::Account { account } => Query::Account { account: AccountId(account) },
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let answers: Vec<(usize, u64, Answered)> = runtime.block_on(async {
        let mut client = record_client(&record, tls)?;
        client.give_up_after = Duration::from_secs(10);
        if let Query::Order { symbol, order } = query {
            // The book's group, or the group the order closed in.
            let (g, index, state) = client.order(symbol, order).await.map_err(|e| format!("order {order}: {e}"))?;
            return Ok(vec![(g, index, Answered::Order(state))]);
        }
        let mut answers = Vec::new();
        for g in client.groups_of(&query) {
            let (answered, index, answer) = client.query(g, &query).await.map_err(|e| format!("group {g}: {e}"))?;
            answers.push((answered, index, answer));
        }
        Ok::<_, String>(answers)
    })?;
    if as_json {
        let answers: Vec<serde_json::Value> =
            answers.iter().map(|(g, index, answer)| json!({ "group": g, "index": index, "answer": answer })).collect();
        println!("{}", json!({ "answers": answers }));
        return Ok(());
    }
    let mut totals: std::collections::BTreeMap<u32, (i64, i64)> = std::collections::BTreeMap::new();
    for (g, index, answer) in &answers {
        match answer {
            Answered::Book { bids, asks, last_px } => {
                println!("group {g}, read at index {index}; last trade {last_px:?}");
                for (px, qty) in asks.iter().rev() {
                    println!("  ask {:>10} {:>10}", px.0, qty.0);
                }
                for (px, qty) in bids {
                    println!("  bid {:>10} {:>10}", px.0, qty.0);
                }
            }
            Answered::Order(None) => println!("group {g}, read at index {index}: no such order (or forgotten)"),
            Answered::Order(Some(order)) => println!(
                "group {g}, read at index {index}: order {} of account {}, {:?} {:?} {:?}, placed {} filled {} \
                 open {} at {:?}, {:?}",
                order.record.id,
                order.record.account,
                order.record.side,
                order.record.kind,
                order.record.tif,
                order.record.qty.0,
                order.record.qty_filled.0,
                order.qty_open.0,
                order.px_resting.map(|px| px.0),
                order.record.status
            ),
            Answered::Account(state) => {
                if state.owned {
                    let suspended = if state.suspended { ", suspended" } else { "" };
                    println!("group {g} owns the account (read at index {index}){suspended}");
                }
                for (asset, available) in &state.available {
                    totals.entry(asset.0).or_default().0 += available;
                }
                for (asset, reserved) in &state.reserved {
                    totals.entry(asset.0).or_default().1 += reserved;
                }
                for order in &state.orders {
                    println!(
                        "  group {g} (index {index}): order {} {:?} {} open at {:?} in symbol {}",
                        order.record.id,
                        order.record.side,
                        order.qty_open.0,
                        order.px_resting.map(|px| px.0),
                        order.record.symbol
                    );
                }
            }
        }
    }
    if matches!(query, Query::Account { .. }) {
        println!("balances (available in its group, reserved by its orders in every group, each at its own index):");
        for (asset, (available, reserved)) in totals {
            println!("  asset {asset}: available {available}, reserved {reserved}");
        }
    }
    Ok(())
}

/// Flags of `bourse group-move`.
#[derive(Args, Debug)]
pub struct GroupMoveArgs {
    /// The directory of `cluster up --groups`.
    #[arg(long)]
    data: PathBuf,
    /// The symbol whose book moves.
    #[arg(long)]
    symbol: u32,
    /// The group it moves to.
    #[arg(long)]
    to: usize,
}

/// `bourse group-move`: moves a symbol's book to another group while the groups run.
pub fn move_book(args: GroupMoveArgs, as_json: bool) -> Result<(), String> {
    let (record, tls) = running_groups(&args.data)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let symbol = bourse_engine::SymbolId(args.symbol);
    let (from, took) = runtime.block_on(async {
        let mut client = record_client(&record, tls)?;
        client.move_symbol(symbol, args.to).await.map_err(|e| format!("moving symbol {symbol}: {e}"))
    })?;
    if as_json {
        println!("{}", json!({ "symbol": args.symbol, "from": from, "to": args.to, "ms": took.as_millis() as u64 }));
    } else {
        let from = from.map_or("where it was".to_string(), |g| format!("group {g}"));
        println!("symbol {symbol}'s book moved from {from} to group {} in {} ms", args.to, took.as_millis());
    }
    Ok(())
}

/// Flags of `bourse group-close-day`.
#[derive(Args, Debug)]
pub struct GroupCloseDayArgs {
    /// The directory of `cluster up --groups`.
    #[arg(long)]
    data: PathBuf,
}

/// `bourse group-close-day`: closes the trading day on running groups, through the
/// catalog's group, as an operator client of its own (a new session, numbered from 1).
pub fn close_day(args: GroupCloseDayArgs, as_json: bool) -> Result<(), String> {
    use bourse_engine::command::CommandBody;
    use bourse_engine::Outcome;
    let (record, tls) = running_groups(&args.data)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let client = bourse_client::random_client_id();
    let started = Instant::now();
    let outcome = runtime.block_on(async {
        let mut groups = record_client(&record, tls)?;
        groups.send(client, 1, CommandBody::CloseDay).await.map_err(|e| format!("closing the day: {e}"))
    })?;
    let took = started.elapsed();
    match outcome.0 {
        Outcome::Ok { id: expired } => {
            if as_json {
                println!("{}", json!({ "ok": true, "expired": expired, "ms": took.as_millis() as u64 }));
            } else {
                println!("the day closed: {expired} Day orders expired across the groups ({} ms)", took.as_millis());
            }
            Ok(())
        }
        Outcome::Rejected(reject) => {
            Err(format!("the close of the day was refused: {reject} (code {})", reject.code()))
        }
    }
}

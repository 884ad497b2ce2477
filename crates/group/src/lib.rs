//! # bourse-group
//!
//! The partitioned exchange of [`bourse_shard`] as processes: every group is a Raft
//! group of `bourse group` members, each a [`GroupMachine`] behind openraft (the
//! member, log store, snapshot store and mutual-TLS transport of [`bourse_cluster`]),
//! and one exchange to its clients through [`client::GroupClient`], which routes each
//! command by the shard map to the leader of its account's group (a catalog or account
//! command to the catalog's group, [`bourse_shard::CATALOG_GROUP`], which passes it on
//! to every other group).
//!
//! - [`member`]: one member process. Its **front**, while the member leads, proposes
//!   the client commands that reached it (stamped on arrival, as one
//!   [`Entry::Clients`](bourse_shard::machine::Entry::Clients)), for every other group
//!   that group's outputs to this one (pulled over the network from any member of it,
//!   from this group's cursor on, as an `Entry::Ingest`: exactly once, whatever the
//!   leaders on either side resend), trims of what the other groups have consumed, and
//!   ticks while some group's merge waits for this one's watermark.
//! - [`wire`]: the group API, postcard frames over mutual TLS with the cluster's CA.
//! - [`client`]: routing, leader discovery, resends with the same number.
//! - [`load`]: traders over a running set of groups, and the checks after: every
//!   group's replicas in one state, every asset conserved across the groups, every
//!   acknowledged command in its session's record.
//!
//! Every member starts from a [`Genesis`] it builds alike. Group 0's leader also orders
//! moves of a book to another group (`Request::Move`) and the close of the day, a cut
//! across the groups that it answers once every group has reported. With a genesis's
//! `meta_group`, group 0 is a meta group of its own: those and nothing else, no account
//! and no book. Not yet: gateways routing by the map, market data and history per
//! group, moving accounts.

pub mod client;
pub mod load;
pub mod member;
pub mod wire;

use bourse_engine::command::{Command, CommandBody, MatchPolicy, SymbolSpec};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, EngineConfig, Outcome, Px, Qty};
use bourse_shard::{GroupMachine, Replicated, ShardMap};
use serde::{Deserialize, Serialize};

/// The client id of the genesis's commands.
pub const GENESIS_CLIENT: ClientId = ClientId(0);
/// Genesis commands are stamped from here on (2020-09-13, before any real stamp).
const GENESIS_STAMP: u64 = 1_600_000_000_000_000_000;

/// What every group holds before its log: the catalog and the opening accounts, as the
/// meta group's config stream and the operator's deposits would leave them. Every
/// member builds its group's machine from it alike ([`Genesis::build`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Genesis {
    pub groups: u32,
    /// Group 0 a meta group of its own: the catalog, the books' placement, the moves
    /// and the cuts, and no account or book ([`bourse_shard::ShardMap::with_meta_group`]).
    #[serde(default)]
    pub meta_group: bool,
    /// Applied in order by the operator (client 0): catalog and account commands go to
    /// every group, deposits and credits to the account's.
    pub commands: Vec<CommandBody>,
}

/// A genesis applied: each group's machine, and the accounts it created in order.
#[derive(Clone, Debug)]
pub struct Built {
    pub machines: Vec<GroupMachine>,
    pub accounts: Vec<AccountId>,
}

impl Genesis {
    /// A market for trying the groups: the asset `USD` (2 decimals) and `symbols`
    /// stocks `S0`, `S1`, … each listed against it, and `accounts` accounts each funded
    /// with 1,000,000.00 USD and 100,000 shares of every stock.
    pub fn market(groups: u32, symbols: u32, accounts: u32) -> Genesis {
        let mut commands = vec![CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }];
        for s in 0..symbols {
            commands.push(CommandBody::CreateAsset { name: format!("S{s}"), decimals: 0 });
        }
        for s in 0..symbols {
            commands.push(CommandBody::CreateSymbol(Box::new(SymbolSpec {
                name: format!("S{s}/USD"),
                base: AssetId(1 + s),
                quote: AssetId(0),
                tick: Px(1),
                lot: Qty(1),
                px_min: Px(10),
                px_max: Px(1_000_000),
                fee_maker: Amount(1),
                fee_taker: Amount(2),
                policy: MatchPolicy::Fifo,
            })));
        }
        // Accounts are numbered from 0 in the order they are created.
        for a in 0..accounts {
            let account = AccountId(a);
            commands.push(CommandBody::CreateAccount);
            commands.push(CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(100_000_000) });
            for s in 0..symbols {
                commands.push(CommandBody::Credit { account, asset: AssetId(1 + s), amount: Amount(100_000) });
            }
        }
        Genesis { groups, meta_group: false, commands }
    }

    /// The same, with group 0 a meta group of its own and `groups - 1` data groups.
    pub fn with_meta_group(mut self) -> Genesis {
        self.meta_group = true;
        self
    }

    /// Where the accounts and books live.
    pub fn map(&self) -> ShardMap {
        if self.meta_group {
            ShardMap::with_meta_group(self.groups)
        } else {
            ShardMap::new(self.groups)
        }
    }

    /// Applies the genesis to `groups` fresh machines; an error names the first command
    /// refused.
    pub fn build(&self) -> Result<Built, String> {
        if !(1..=64).contains(&self.groups) {
            return Err(format!("genesis: {} groups (1 to 64 are allowed)", self.groups));
        }
        if self.meta_group && self.groups < 2 {
            return Err("genesis: a meta group needs at least one data group beside it (groups >= 2)".into());
        }
        let mut replicated = Replicated::with_map(self.map(), EngineConfig::default(), 0, false);
        let mut accounts = Vec::new();
        for (n, body) in self.commands.iter().enumerate() {
            let command = Command {
                client: GENESIS_CLIENT,
                seq: n as u64 + 1,
                ts: GENESIS_STAMP + n as u64 * 1_000,
                body: body.clone(),
            };
            let refused = |outcome: &Outcome| format!("genesis: command {} ({body:?}) refused: {outcome:?}", n + 1);
            match replicated.submit(command).map_err(|e| format!("genesis: command {}: {e}", n + 1))? {
                Some(Outcome::Ok { id }) => {
                    if matches!(body, CommandBody::CreateAccount | CommandBody::CreateAccountWithId { .. }) {
                        accounts.push(AccountId(id as u32));
                    }
                }
                Some(outcome) => return Err(refused(&outcome)),
                None => {}
            }
            replicated.drain();
            for ack in replicated.take_acks() {
                if !matches!(ack.outcome, Outcome::Ok { .. }) {
                    return Err(refused(&ack.outcome));
                }
            }
        }
        Ok(Built { machines: replicated.machines().cloned().collect(), accounts })
    }

    pub fn read(path: &std::path::Path) -> Result<Genesis, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn write(&self, path: &std::path::Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::Genesis;

    #[test]
    fn a_genesis_builds_alike_every_time_and_survives_its_file() {
        let genesis = Genesis::market(2, 2, 4);
        let a = genesis.build().expect("the market builds");
        let b = genesis.build().expect("the market builds");
        assert_eq!(a.accounts.len(), 4);
        for (x, y) in a.machines.iter().zip(&b.machines) {
            assert!(x.same_state(y));
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("genesis.json");
        genesis.write(&path).expect("written");
        assert_eq!(Genesis::read(&path).expect("read"), genesis);
    }

    #[test]
    fn a_genesis_with_a_refused_command_names_it() {
        let mut genesis = Genesis::market(2, 1, 1);
        genesis.commands.push(bourse_engine::command::CommandBody::Withdraw {
            account: bourse_engine::AccountId(0),
            asset: bourse_engine::AssetId(0),
            amount: bourse_engine::Amount(1 << 40),
        });
        let error = genesis.build().expect_err("an overdraft is refused");
        assert!(error.contains("refused"), "{error}");
    }
}

#[cfg(test)]
mod flow {
    use bourse_engine::command::{Command, CommandBody, OrderRequest, Tif};
    use bourse_engine::{AccountId, ClientId, Px, Qty, Side, SymbolId};
    use bourse_shard::machine::Entry;

    use super::Genesis;

    #[test]
    fn an_order_crosses_two_genesis_machines() {
        let mut machines = Genesis::market(2, 4, 16).build().expect("builds").machines;
        let map = bourse_shard::ShardMap::new(2);
        let account = AccountId(5);
        let a = map.account_group(account);
        let body = CommandBody::Place(OrderRequest::limit(account, SymbolId(1), Side::Buy, Px(900), Qty(1), Tif::Gtc));
        let stamp = 1_700_000_000_000_000_000;
        let mut acks = Vec::new();
        let command = Command { client: ClientId(77), seq: 1, ts: stamp, body };
        machines[a].apply(&Entry::Clients { commands: vec![command], tick: stamp + 1 }, &mut acks).expect("applies");
        for round in 0..6 {
            for g in 0..2 {
                let other = 1 - g;
                let from = machines[g].cursor(other) + 1;
                let (start, outputs) = machines[other].outputs(g, from, 512);
                if !outputs.is_empty() {
                    machines[g].apply(&Entry::Ingest { source: other, from: start, outputs }, &mut acks).expect("ok");
                }
                let tick = stamp + 10 + round * 2 + g as u64;
                machines[g].apply(&Entry::Clients { commands: vec![], tick }, &mut acks).expect("ok");
            }
        }
        assert_eq!(acks.len(), 1, "{acks:?}");
        assert!(matches!(acks[0].outcome, bourse_engine::Outcome::Ok { .. }), "{acks:?}");
    }
}

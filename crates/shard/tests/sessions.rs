//! The groups bound their clients' sessions as one engine bounds its clients: a session
//! none of whose commands applied for `client_expiry_secs` of log time is forgotten,
//! and while `clients_max` sessions are kept a new client's command is refused
//! (`limit_reached`) and leaves no trace. Without it every client a group ever saw (a
//! `group-close-day` by hand, a gateway's session) stayed in its state for good.

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, EngineConfig, Outcome, Reject};
use bourse_shard::{Replicated, ShardMap};

const SEC: u64 = 1_000_000_000;

/// Sends `client`'s command numbered `seq`, stamped `ts`: its outcome (a catalog
/// command's at once, another's once the groups have drained), and whether that was a
/// session's memory of an earlier application.
fn send(groups: &mut Replicated, client: u64, seq: u64, ts: u64, body: CommandBody) -> (Outcome, bool) {
    if let Some(outcome) = groups.submit(Command { client: ClientId(client), seq, ts, body }).expect("carried") {
        return (outcome, false);
    }
    groups.drain();
    let acks = groups.take_acks();
    assert_eq!(acks.len(), 1, "{acks:?}");
    (acks[0].outcome, acks[0].repeat)
}

/// Applied anew, not answered from a session's memory.
fn applied((outcome, repeat): (Outcome, bool)) -> bool {
    matches!(outcome, Outcome::Ok { .. }) && !repeat
}

/// The clients group `g` keeps a session of, alike on every replica.
fn sessions(groups: &Replicated, g: usize) -> Vec<u64> {
    let mut of: Vec<Vec<u64>> = groups
        .machines()
        .filter(|machine| machine.group() == g)
        .map(|machine| {
            let mut clients: Vec<u64> = machine.account.sessions().map(|(client, _)| client.0).collect();
            clients.sort_unstable();
            clients
        })
        .collect();
    of.dedup();
    assert_eq!(of.len(), 1, "the replicas of group {g} keep different sessions: {of:?}");
    of.remove(0)
}

#[test]
fn idle_sessions_are_forgotten_and_a_new_client_past_the_cap_is_refused_without_a_trace() {
    let config = EngineConfig { clients_max: 4, client_expiry_secs: 60, ..EngineConfig::default() };
    let mut groups = Replicated::new(2, config, 7, false);
    let t0 = 1_000 * SEC;
    let mut seq = 0;
    let mut operate = |groups: &mut Replicated, body: CommandBody| {
        seq += 1;
        send(groups, 0, seq, t0, body).0
    };
    operate(&mut groups, CommandBody::CreateAsset { name: "USD".into(), decimals: 2 });
    for _ in 0..4 {
        operate(&mut groups, CommandBody::CreateAccount);
    }
    // An account of group 1: the operator's session is with group 0.
    let map = ShardMap::new(2);
    let account = (0..4).map(AccountId).find(|&a| map.account_group(a) == 1).expect("an account of group 1");
    let deposit = CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(1) };
    for client in 10..14 {
        assert!(applied(send(&mut groups, client, 1, t0 + client, deposit.clone())));
    }
    assert_eq!(sessions(&groups, 1), vec![10, 11, 12, 13]);
    // The fifth is refused and not remembered.
    let refused = send(&mut groups, 14, 1, t0 + 20, deposit.clone());
    assert_eq!(refused, (Outcome::Rejected(Reject::LimitReached), false));
    assert_eq!(sessions(&groups, 1), vec![10, 11, 12, 13]);
    // Client 10 keeps its session alive; the others go idle.
    assert!(applied(send(&mut groups, 10, 2, t0 + 30 * SEC, deposit.clone())));
    // 70 s in: 11–13 have been idle past the expiry and are forgotten, 10 is not; 14 is
    // taken now.
    assert!(applied(send(&mut groups, 14, 1, t0 + 70 * SEC, deposit.clone())));
    assert_eq!(sessions(&groups, 1), vec![10, 14]);
    // A forgotten client numbered from 1 again is a new session: its command applies
    // anew (remembered, it would be answered from the session's memory). Client 10's
    // session goes on.
    assert!(applied(send(&mut groups, 11, 1, t0 + 72 * SEC, deposit.clone())));
    assert!(applied(send(&mut groups, 10, 3, t0 + 73 * SEC, deposit.clone())));
    // Client 10's earlier command is still answered from its memory.
    assert!(send(&mut groups, 10, 2, t0 + 74 * SEC, deposit.clone()).1);
    assert_eq!(sessions(&groups, 1), vec![10, 11, 14]);
    // Group 0 has applied no client command since the operator's: no sweep has run
    // there, and its session stands.
    assert_eq!(sessions(&groups, 0), vec![0]);
    groups.conservation().expect("every asset conserved");
}

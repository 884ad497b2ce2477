//! Exhaustive checks of the protocol models (docs/ARCHITECTURE.md, "Model checking"): the
//! real protocol holds every property over every reachable state within the bounds, and
//! each planted mistake is found, with the shortest path to it printed.

use std::fmt::Debug;
use std::time::Instant;

use bourse_model::fairness::{self, Fairness};
use bourse_model::replication::{self, Replication};
use stateright::{Checker, HasDiscoveries, Model};

/// Checks `model` exhaustively, breadth first, on one thread (deterministic), and prints
/// the size of what it visited.
fn check<M>(name: &str, model: M) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + std::hash::Hash + Clone + PartialEq + Send + Sync + 'static,
    M::Action: Debug + Clone + PartialEq + Send + Sync + 'static,
{
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    println!(
        "{name}: {} states ({} unique), depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    assert!(checker.is_done(), "{name}: the search did not finish");
    checker
}

/// Searches `model` breadth first until a state violates `property` (so the path to it
/// is a shortest one), and prints the actions that lead there.
fn counterexample<M>(name: &str, model: M, property: &'static str) -> Vec<M::Action>
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + std::hash::Hash + Clone + PartialEq + Send + Sync + 'static,
    M::Action: Debug + Clone + PartialEq + Send + Sync + 'static,
{
    let started = Instant::now();
    let checker =
        model.checker().finish_when(HasDiscoveries::AnyOf([property].into_iter().collect())).spawn_bfs().join();
    println!("{name}: {} states searched, {:.1} s", checker.unique_state_count(), started.elapsed().as_secs_f64());
    let path = checker.assert_any_discovery(property);
    let actions = path.into_actions();
    println!("  counterexample to \"{property}\" in {} steps:", actions.len());
    for action in &actions {
        println!("    {action:?}");
    }
    actions
}

#[test]
fn replication_holds_every_property() {
    check("replication", Replication::default()).assert_properties();
}

/// Five replicas, within reach by symmetry reduction (states that differ only by which
/// replica is which are visited once; depth first, as stateright reduces only there).
#[test]
fn replication_with_five_replicas_holds() {
    let model = Replication { replicas: 5, commands: 1, ..Replication::default() };
    let started = Instant::now();
    let checker = model.checker().symmetry_fn(replication::representative).spawn_dfs().join();
    println!(
        "replication, 5 replicas, one command (symmetry): {} states ({} unique), {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        started.elapsed().as_secs_f64()
    );
    assert!(checker.is_done());
    checker.assert_properties();
    // The reduction hides no violation: the same search finds a planted one.
    let bugs = replication::Bugs { ack_before_commit: true, ..Default::default() };
    let planted = Replication { replicas: 5, commands: 1, bugs, ..Replication::default() };
    let checker = planted.checker().symmetry_fn(replication::representative).spawn_dfs().join();
    checker.assert_any_discovery("an acknowledged command is never lost");
}

#[test]
fn replication_through_three_elections_holds() {
    let model = Replication { commands: 1, max_term: 3, ..Replication::default() };
    check("replication, one command, terms up to 3", model).assert_properties();
}

#[test]
fn acknowledging_before_commit_loses_an_acknowledged_command() {
    let bugs = replication::Bugs { ack_before_commit: true, ..Default::default() };
    let model = Replication { bugs, ..Replication::default() };
    let path = counterexample("replication, ack before commit", model, "an acknowledged command is never lost");
    assert!(path.iter().any(|a| matches!(a, replication::Action::Elect { .. })), "lost through a leader change");
}

#[test]
fn skipping_the_duplicate_check_applies_a_retried_command_twice() {
    let bugs = replication::Bugs { skip_duplicate_check: true, ..Default::default() };
    let model = Replication { bugs, ..Replication::default() };
    let path = counterexample("replication, no duplicate check", model, "no command takes effect twice");
    let sends = path.iter().filter(|a| matches!(a, replication::Action::Send { .. })).count();
    assert!(sends >= 2, "a retry is what gets applied twice");
    // Without retries the same bug cannot show.
    let once = Replication { sends: 1, bugs, ..Replication::default() };
    check("replication, no duplicate check, no retries", once).assert_no_discovery("no command takes effect twice");
}

#[test]
fn installing_an_older_snapshot_emits_effects_twice() {
    let bugs = replication::Bugs { install_older_snapshot: true, ..Default::default() };
    let model = Replication { bugs, ..Replication::default() };
    let path = counterexample("replication, older snapshot installed", model, "no command takes effect twice");
    assert!(path.iter().any(|a| matches!(a, replication::Action::InstallSnapshot { .. })));
}

#[test]
fn fairness_holds_every_property() {
    check("fairness", Fairness::default()).assert_properties();
}

#[test]
fn releasing_market_data_early_is_found() {
    let bugs = fairness::Bugs { release_early: true };
    let model = Fairness { bugs, ..Fairness::default() };
    counterexample("fairness, release on arrival", model, "no market data leaves a gateway before t_m + d_h");
}

#[test]
fn without_the_window_orders_leave_out_of_stamp_order() {
    // The ordering property has teeth: the sequencer off (arrival order), same promise.
    let model = Fairness { window: 0, ..Fairness::default() };
    counterexample(
        "fairness, window 0",
        model,
        "orders that reach the sequencer within the window are sequenced in stamp order",
    );
}

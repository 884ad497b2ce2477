//! The threaded pipeline (a thread per group) ends where one engine does, on a
//! generated market: many books, exchange-core 2018's mix, accounts spread over the
//! groups by hash so that most orders cross from one group to another.

use bourse_engine::command::Command;
use bourse_engine::{Engine, EngineConfig};
use bourse_shard::{threads, Replicated, Summary, Translator};
use bourse_sim::workload::generator::Generator;
use bourse_sim::workload::market::Market;
use bourse_sim::workload::scale::{scale_market_spec, SCALE_PROFILE};

fn threaded_equals_one_engine(groups: u32, seed: u64) {
    let mut market = Market::new(scale_market_spec(3_000, 40, 5), seed);
    let mut setup: Vec<Command> = Vec::new();
    while let Some(command) = market.next_setup() {
        setup.push(command);
    }
    let config = EngineConfig::default();
    let mut engine: Engine = Engine::new(config);
    let mut replicated = Replicated::new(groups, config, seed, false);
    let mut translator = Translator::default();
    translator.translate(&mut engine, &mut replicated, &setup);

    let mut generator = Generator::new(market, engine.clone(), SCALE_PROFILE, 1 << 20);
    let commands = generator.generate(40_000);
    let start = replicated.groups();
    let translated = translator.translate(&mut engine, &mut replicated, &commands);
    assert_eq!(Summary::of_engine(generator.engine()), Summary::of_engine(&engine));
    assert_eq!(replicated.summary(), Summary::of_engine(&engine), "in one thread, {groups} groups");

    let named = translated.deps.iter().filter(|&&dep| dep != threads::NO_DEP).count();
    assert!(named > commands.len() / 2, "the mix names orders: {named} of {}", commands.len());
    let (end, report) = threads::run(start, &translated.commands, &translated.deps, 128, 4_096);
    assert_eq!(report.acked, commands.len() as u64);
    assert_eq!(report.refused, generator.mix().rejected, "refusals, {groups} groups");
    assert_eq!(Summary::of_groups(&end), Summary::of_engine(&engine), "threads, {groups} groups");
    for part in &end.symbols {
        part.engine().check_invariants();
    }
}

#[test]
fn one_group_on_a_thread_ends_as_one_engine() {
    threaded_equals_one_engine(1, 7);
}

#[test]
fn two_and_four_groups_on_threads_end_as_one_engine() {
    for seed in 1..=2 {
        threaded_equals_one_engine(2, seed);
        threaded_equals_one_engine(4, seed);
    }
}

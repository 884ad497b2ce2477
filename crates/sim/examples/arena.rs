//! Runs a scenario on an in-process engine and prints each symbol's last price every
//! ten simulated seconds: `cargo run -p bourse-sim --example arena -- [cloudex|mixed] [seconds] [seed]`.

use bourse_sim::agents::arena::Arena;
use bourse_sim::agents::scenario::Scenario;
use bourse_sim::agents::NS_PER_SEC;

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "cloudex".into());
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(300);
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let scenario = Scenario::by_name(&name, seed).expect("cloudex or mixed");
    let mut arena = Arena::new(&scenario);
    let names: Vec<&str> = scenario.symbols.iter().map(|s| s.name.as_str()).collect();
    println!("{:>6} {}", "t (s)", names.iter().map(|n| format!("{n:>7}")).collect::<String>());
    for t in (10..=seconds).step_by(10) {
        arena.run_until(t * NS_PER_SEC);
        let row: String = arena.quotes().iter().map(|q| format!("{:>7}", q.last.unwrap_or(0))).collect();
        println!("{t:>6} {row}");
    }
    let stats = arena.stats();
    println!("commands {}, trades {:?}, rejected {:?}", stats.commands, stats.trades, stats.rejected);
    let marks: Vec<Option<i64>> = arena.quotes().iter().map(|q| q.last).collect();
    for (a, agent) in scenario.agents.iter().enumerate().filter(|(a, _)| a % 6 == 0) {
        println!("{:<20} value {:>14}", agent.name, arena.portfolio(a).value(&marks));
    }
}

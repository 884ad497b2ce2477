//! Single flight of quote fetches: one fetch of a symbol at a time, however many calls
//! need its price at once (spec 7.1: the cache is shared by every user).
//!
//! The first call that needs a fresh quote of a symbol *leads*: it fetches, attaches the
//! quote to its own command and holds the [`Flight`] until that command is committed —
//! the engine has then logged the quote (its `quoteServer` record, with the leader's
//! command) and cached it at the entry's stamp. Calls that need the same symbol
//! meanwhile *wait* for the flight to land, then look at the service's view again: it
//! now holds the quote, so they go without one and the engine serves them from its
//! cache. They wait for the commit, not for the fetch: a command sent before the
//! leader's entry is in the log could be applied first (it travels on its own user's
//! session) and find no valid quote.
//!
//! How a flight lands ([`Landing`]):
//! - `Committed`: the leader's command was committed; waiters look again (the view is
//!   fresh unless the validity is shorter than the refresh margin).
//! - `FetchFailed`: the source gave no quote; waiters go without one, as the leader
//!   does, rather than each asking a source that is down, one after another.
//! - `Lost`: the leader's command did not reach the log (its session ended, the exchange
//!   refused it before the log), or its flight was dropped: waiters look again and one
//!   of them leads a new flight.
//!
//! Bounds: one entry per symbol ever fetched (at most 26³ + 26² + 26 by grammar).

use std::sync::Mutex;

use bourse_engine::daytrading::Sym;
use rustc_hash::FxHashMap;
use tokio::sync::watch;

/// How a flight ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landing {
    Committed,
    FetchFailed,
    Lost,
}

/// The flights of every symbol: each symbol's latest, landed or not.
#[derive(Default)]
pub struct Flights {
    by_symbol: Mutex<FxHashMap<Sym, watch::Receiver<Option<Landing>>>>,
}

/// A call's turn on a symbol: lead a new flight, or wait for the one in the air.
pub enum Turn {
    Lead(Flight),
    Wait(Waiting),
}

impl Flights {
    /// Leads a new flight of `symbol` unless one is in the air, which the caller then
    /// waits for.
    pub fn join(&self, symbol: Sym) -> Turn {
        let mut by_symbol = self.by_symbol.lock().expect("flights lock");
        if let Some(receiver) = by_symbol.get(&symbol) {
            if receiver.borrow().is_none() {
                return Turn::Wait(Waiting(receiver.clone()));
            }
        }
        let (sender, receiver) = watch::channel(None);
        by_symbol.insert(symbol, receiver);
        Turn::Lead(Flight { sender })
    }

    /// Whether a fetch of `symbol` is in the air.
    pub fn in_air(&self, symbol: Sym) -> bool {
        let by_symbol = self.by_symbol.lock().expect("flights lock");
        by_symbol.get(&symbol).is_some_and(|receiver| receiver.borrow().is_none())
    }
}

/// A flight being led: it lands `Lost` if dropped before [`Flight::land`].
pub struct Flight {
    sender: watch::Sender<Option<Landing>>,
}

impl Flight {
    pub fn land(self, how: Landing) {
        self.set(how);
    }

    fn set(&self, how: Landing) {
        self.sender.send_if_modified(|landing| {
            let first = landing.is_none();
            if first {
                *landing = Some(how);
            }
            first
        });
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.set(Landing::Lost);
    }
}

impl std::fmt::Debug for Flight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Flight")
    }
}

/// A flight another call leads.
pub struct Waiting(watch::Receiver<Option<Landing>>);

impl Waiting {
    /// How the flight landed.
    pub async fn landed(mut self) -> Landing {
        match self.0.wait_for(Option::is_some).await {
            Ok(landing) => landing.unwrap_or(Landing::Lost),
            // Unreachable: a flight lands before its sender goes.
            Err(_) => Landing::Lost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(text: &str) -> Sym {
        Sym::parse(text).unwrap()
    }

    #[tokio::test]
    async fn one_leads_the_others_wait_until_it_lands() {
        let flights = Flights::default();
        let Turn::Lead(flight) = flights.join(sym("ABC")) else { panic!("the first call leads") };
        let Turn::Wait(waiting) = flights.join(sym("ABC")) else { panic!("the second waits") };
        assert!(matches!(flights.join(sym("XYZ")), Turn::Lead(_)), "another symbol flies on its own");
        assert!(flights.in_air(sym("ABC")));
        let waiter = tokio::spawn(waiting.landed());
        flight.land(Landing::Committed);
        assert_eq!(waiter.await.unwrap(), Landing::Committed);
        assert!(!flights.in_air(sym("ABC")));
        // Landed: the next call leads a new flight.
        let Turn::Lead(next) = flights.join(sym("ABC")) else { panic!("a new flight") };
        let Turn::Wait(waiting) = flights.join(sym("ABC")) else { panic!("waits") };
        next.land(Landing::FetchFailed);
        assert_eq!(waiting.landed().await, Landing::FetchFailed);
    }

    #[tokio::test]
    async fn a_dropped_flight_lands_lost() {
        let flights = Flights::default();
        let Turn::Lead(flight) = flights.join(sym("Q")) else { panic!("leads") };
        let Turn::Wait(waiting) = flights.join(sym("Q")) else { panic!("waits") };
        drop(flight);
        assert_eq!(waiting.landed().await, Landing::Lost);
        assert!(matches!(flights.join(sym("Q")), Turn::Lead(_)));
    }
}

//! A client of the partitioned exchange: routes each command to the leader of its
//! account's group (a catalog or account command to the catalog's group,
//! [`CATALOG_GROUP`]), learned from the members' answers, and sends it again with the
//! same number in the client's session with that group until it has an outcome.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::{ClientId, OrderId, Outcome, Reject, SymbolId};
use bourse_pki::ReloadableClientConfig;
use bourse_shard::{route, Route, ShardMap, CATALOG_GROUP, ORDER_ID_BITS};

use crate::wire::{Answer, Answered, Connection, OrderState, Query, Reply, Request, State};

/// Why a command has no outcome.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("refused before the log: {0}")]
    Refused(String),
    #[error("no outcome within {0:?}: {1}")]
    Timeout(Duration, String),
    #[error("{0}")]
    Query(String),
}

/// One group's members as the client knows them.
struct Group {
    addresses: Vec<String>,
    /// The member that last led, by index into `addresses`.
    leader: usize,
    connection: Option<(usize, Connection)>,
}

impl Group {
    /// After member `at` said it does not lead: the leader it named, when this group
    /// has it, or else the next member.
    fn follow(&mut self, at: usize, leader: Option<String>) {
        self.leader = leader
            .and_then(|api| self.addresses.iter().position(|a| *a == api))
            .unwrap_or((at + 1) % self.addresses.len());
    }

    /// The connection to the member that last led, opened when there is none; an
    /// error moves on to the next member for the next try.
    async fn leader_connection(
        &mut self,
        tls: Option<&Arc<ReloadableClientConfig>>,
    ) -> Result<&mut Connection, String> {
        let at = self.leader;
        if self.connection.as_ref().is_none_or(|(of, _)| *of != at) {
            match Connection::open(&self.addresses[at], tls).await {
                Ok(connection) => self.connection = Some((at, connection)),
                Err(error) => {
                    self.leader = (at + 1) % self.addresses.len();
                    return Err(error);
                }
            }
        }
        Ok(&mut self.connection.as_mut().expect("just opened").1)
    }
}

/// See the module's docs. One command at a time per client (the sessions' gap check
/// refuses a command that overtook its predecessor; one at a time never does).
pub struct GroupClient {
    map: ShardMap,
    groups: Vec<Group>,
    tls: Option<Arc<ReloadableClientConfig>>,
    /// How long [`GroupClient::send`] keeps trying.
    pub give_up_after: Duration,
    /// Resends, for reports.
    pub resends: u64,
}

impl GroupClient {
    /// `directory`: every group's members' API addresses, in group order; `map`: where
    /// the accounts and books live (the genesis's, [`crate::Genesis::map`]).
    pub fn new(directory: Vec<Vec<String>>, map: ShardMap, tls: Option<Arc<ReloadableClientConfig>>) -> GroupClient {
        assert_eq!(map.groups(), directory.len(), "a directory entry for every group of the map");
        GroupClient {
            map,
            groups: directory.into_iter().map(|addresses| Group { addresses, leader: 0, connection: None }).collect(),
            tls,
            give_up_after: Duration::from_secs(30),
            resends: 0,
        }
    }

    pub fn map(&self) -> ShardMap {
        self.map
    }

    /// The group a command goes to.
    pub fn group_of(&self, body: &CommandBody) -> Result<usize, ClientError> {
        match route(&self.map, body) {
            Ok(Route::Account(g)) => Ok(g),
            Ok(Route::Config) => Ok(CATALOG_GROUP),
            Err(unsupported) => Err(ClientError::Refused(unsupported.to_string())),
        }
    }

    /// Sends `client`'s command numbered `seq` in its session with the command's group,
    /// to that group's leader, again and again until it has an outcome. A
    /// `sequence_gap` (an earlier command of the client not yet applied) is sent again
    /// too; the outcome returned is never that.
    pub async fn send(
        &mut self,
        client: ClientId,
        seq: u64,
        body: CommandBody,
    ) -> Result<(Outcome, bool), ClientError> {
        let g = self.group_of(&body)?;
        let command = Command { client, seq, ts: 0, body };
        let started = Instant::now();
        let mut last = String::new();
        let mut first = true;
        while started.elapsed() < self.give_up_after {
            if !first {
                self.resends += 1;
            }
            first = false;
            let group = &mut self.groups[g];
            let at = group.leader;
            let connection = match group.leader_connection(self.tls.as_ref()).await {
                Ok(connection) => connection,
                Err(error) => {
                    last = error;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let request = Request::Submit { commands: vec![command.clone()] };
            let answer = match connection.call(&request, Duration::from_secs(5)).await {
                Ok(Reply::Submitted(mut answers)) if answers.len() == 1 => answers.remove(0),
                Ok(Reply::Error(error)) => return Err(ClientError::Refused(error)),
                Ok(other) => {
                    last = format!("unexpected reply {other:?}");
                    group.connection = None;
                    continue;
                }
                Err(error) => {
                    last = error;
                    group.connection = None;
                    group.leader = (at + 1) % group.addresses.len();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            match answer {
                Answer::Done { outcome: Outcome::Rejected(Reject::SequenceGap), .. } => {
                    last = "sequence_gap".into();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Answer::Done { outcome, repeat, .. } => return Ok((outcome, repeat)),
                Answer::Refused(reason) => return Err(ClientError::Refused(reason)),
                Answer::Pending => last = "pending".into(),
                Answer::NotLeader { leader } => {
                    last = format!("not the leader (the leader: {leader:?})");
                    group.follow(at, leader);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        Err(ClientError::Timeout(self.give_up_after, last))
    }

    /// The groups a query goes to: a book or an order to its symbol's group, an account
    /// to every data group (each holds what the account's orders in its books reserve;
    /// a meta group holds none).
    pub fn groups_of(&self, query: &Query) -> Vec<usize> {
        match query {
            Query::Book { symbol, .. } | Query::Order { symbol, .. } => vec![self.map.symbol_group(*symbol)],
            Query::Account { .. } | Query::Record { .. } => self.data_groups(),
        }
    }

    /// The groups that hold accounts and books.
    fn data_groups(&self) -> Vec<usize> {
        (0..self.groups.len()).filter(|&g| self.map.holds_data(g)).collect()
    }

    /// Order `order` of `symbol`, wherever its record is: asked of the book's group
    /// (as [`GroupClient::query`] follows it), and when that group has no record of
    /// it, of every other group's own records, the group that numbered it first (an
    /// order that closed before its book moved stays where it closed). The group that
    /// answered and the index it read at; `None` when no group has it (never placed,
    /// another symbol's, or forgotten: closed orders are kept up to the engine's
    /// `orders_closed_max`).
    pub async fn order(
        &mut self,
        symbol: SymbolId,
        order: OrderId,
    ) -> Result<(usize, u64, Option<OrderState>), ClientError> {
        let unexpected = |answer: Answered| ClientError::Query(format!("unexpected answer {answer:?}"));
        let (book, index, answer) = self.query(self.map.symbol_group(symbol), &Query::Order { symbol, order }).await?;
        match answer {
            Answered::Order(Some(state)) => return Ok((book, index, Some(state))),
            Answered::Order(None) => {}
            other => return Err(unexpected(other)),
        }
        let numbered = (order.0 >> ORDER_ID_BITS) as usize;
        let mut others: Vec<usize> = self.data_groups().into_iter().filter(|&g| g != book).collect();
        others.sort_by_key(|&g| g != numbered);
        for g in others {
            match self.query(g, &Query::Record { order }).await? {
                // One group holds an order's record at a time: found, it is the order.
                (g, index, Answered::Order(Some(state))) if state.record.symbol == symbol => {
                    return Ok((g, index, Some(state)));
                }
                (_, _, Answered::Order(Some(_))) => break,
                (_, _, Answered::Order(None)) => {}
                (_, _, other) => return Err(unexpected(other)),
            }
        }
        Ok((book, index, None))
    }

    /// Asks group `g`'s leader `query` (following the leader, and the group a moved
    /// book lives in now, until [`GroupClient::give_up_after`]); the group that answered,
    /// the index it read at, and the answer.
    pub async fn query(&mut self, g: usize, query: &Query) -> Result<(usize, u64, Answered), ClientError> {
        self.ask(g, &Request::Query(query.clone())).await.and_then(|(g, reply)| match reply {
            Reply::Queried { index, answer } => Ok((g, index, answer)),
            other => Err(ClientError::Query(format!("unexpected reply {other:?}"))),
        })
    }

    /// Moves `symbol`'s book to group `to` (asked of the catalog's group's leader, and
    /// asked again, as a resend, while the answer is lost or the move was not seen done):
    /// the group it left (`None` when only a resend was answered) and how long it took.
    pub async fn move_symbol(&mut self, symbol: SymbolId, to: usize) -> Result<(Option<usize>, Duration), ClientError> {
        let started = Instant::now();
        let again = Request::Move { symbol, to, again: true };
        let mut request = Request::Move { symbol, to, again: false };
        while started.elapsed() < self.give_up_after * 2 {
            match self.ask_resending(CATALOG_GROUP, &request, &again).await {
                Ok((_, Reply::Moved { from, .. })) => return Ok((from, started.elapsed())),
                Ok((_, other)) => return Err(ClientError::Query(format!("unexpected reply {other:?}"))),
                Err(ClientError::Query(error)) if error.contains(crate::wire::MOVE_NOT_SEEN) => request = again.clone(),
                Err(ClientError::Timeout(..)) => request = again.clone(),
                Err(error) => return Err(error),
            }
        }
        Err(ClientError::Timeout(self.give_up_after * 2, format!("the move of symbol {symbol} was not answered")))
    }

    /// Sends `request` to group `g`'s leader until it answers (an error reply is
    /// returned as [`ClientError::Query`]).
    async fn ask(&mut self, g: usize, request: &Request) -> Result<(usize, Reply), ClientError> {
        self.ask_resending(g, request, request).await
    }

    /// [`GroupClient::ask`], sending `resend` after the first try.
    async fn ask_resending(
        &mut self,
        mut g: usize,
        first: &Request,
        resend: &Request,
    ) -> Result<(usize, Reply), ClientError> {
        let mut request = first;
        let started = Instant::now();
        let mut last = String::new();
        let groups = self.groups.len();
        let mut redirected = 0u32;
        while started.elapsed() < self.give_up_after {
            let group = &mut self.groups[g];
            let at = group.leader;
            let connection = match group.leader_connection(self.tls.as_ref()).await {
                Ok(connection) => connection,
                Err(error) => {
                    last = error;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let reply = connection.call(request, Duration::from_secs(30)).await;
            request = resend;
            match reply {
                Ok(Reply::Error(error)) => return Err(ClientError::Query(error)),
                Ok(Reply::Elsewhere { group: other }) if other < groups => {
                    last = format!("group {g} sent the question to group {other}");
                    g = other;
                    redirected += 1;
                    if redirected > 1 {
                        // Sent back and forth: the groups have not all applied the
                        // book's move yet.
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
                Ok(Reply::NotLeader { leader }) => {
                    last = format!("not the leader (the leader: {leader:?})");
                    group.follow(at, leader);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(reply @ (Reply::Queried { .. } | Reply::Moved { .. })) => return Ok((g, reply)),
                Ok(other) => {
                    last = format!("unexpected reply {other:?}");
                    group.connection = None;
                }
                Err(error) => {
                    last = error;
                    group.connection = None;
                    group.leader = (at + 1) % group.addresses.len();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        Err(ClientError::Timeout(self.give_up_after, last))
    }

    /// Every reachable member's state (with its machine when `machine`).
    pub async fn states(&self, machine: bool) -> Vec<Result<State, String>> {
        let mut states = Vec::new();
        for group in &self.groups {
            for address in &group.addresses {
                let state = async {
                    let mut connection = Connection::open(address, self.tls.as_ref()).await?;
                    match connection.call(&Request::State { machine }, Duration::from_secs(10)).await? {
                        Reply::State(state) => Ok(state),
                        other => Err(format!("{address}: unexpected reply {other:?}")),
                    }
                };
                states.push(state.await);
            }
        }
        states
    }
}

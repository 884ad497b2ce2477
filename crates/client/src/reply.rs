//! The answer to one command.

use bourse_engine::Outcome;
use bourse_protocol::proto;

/// The node's answer to one command: the engine's outcome (the new id, or a rejection
/// that changed nothing) and where in the log it was decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The command's seq.
    pub seq: u64,
    pub outcome: Outcome,
    /// The log entry that carried the command; for a duplicate, the entry of the retry.
    pub log_index: u64,
    /// True when the node had applied this seq before (a retry after a lost answer):
    /// the outcome is the original one and nothing changed this time.
    pub duplicate: bool,
    /// Through a gateway: when it received the command, on its clock (ns since the
    /// epoch); 0 from a node.
    pub gateway_ts: u64,
    /// A day-trading command's result (boxed: rare next to orders).
    pub day_trading: Option<Box<proto::DayTradingResult>>,
}

impl Reply {
    /// The new id of an accepted command (asset, symbol, account or order id; 0 for
    /// commands that create nothing), or `None` when it was rejected.
    pub fn ok_id(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Ok { id } => Some(id),
            Outcome::Rejected(_) => None,
        }
    }
}

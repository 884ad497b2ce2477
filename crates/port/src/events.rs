//! Order events of a session, decoded to engine types.

use bourse_client::{Events, SessionEvent};
use bourse_engine::{CancelReason, Side};
use bourse_protocol::convert::{self, ConvertError};

/// A fill or a cancellation of one of a session's orders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderEvent {
    Fill {
        order: u64,
        account: u32,
        symbol: u32,
        side: Side,
        px: i64,
        qty: i64,
        /// Paid by this order, in quote minor units; negative is a rebate.
        fee: i64,
        /// The order was resting in the book.
        maker: bool,
        counter_order: u64,
        log_index: u64,
        trade_seq: u32,
        ts: u64,
    },
    Cancelled {
        order: u64,
        account: u32,
        symbol: u32,
        qty_cancelled: i64,
        reason: CancelReason,
        log_index: u64,
        ts: u64,
    },
}

impl OrderEvent {
    /// The order event `event` carries: `None` for a command's answer, an error for a
    /// report this version cannot read (an enum it does not know).
    pub fn decode(event: SessionEvent) -> Option<Result<OrderEvent, ConvertError>> {
        match event {
            SessionEvent::Fill(fill) => {
                Some(convert::side_from_proto(fill.side, "FillReport.side").map(|side| OrderEvent::Fill {
                    order: fill.order,
                    account: fill.account,
                    symbol: fill.symbol,
                    side,
                    px: fill.px,
                    qty: fill.qty,
                    fee: fill.fee,
                    maker: fill.maker,
                    counter_order: fill.counter_order,
                    log_index: fill.log_index,
                    trade_seq: fill.trade_seq,
                    ts: fill.ts,
                }))
            }
            SessionEvent::Cancel(cancel) => {
                Some(convert::cancel_reason_from_proto(cancel.reason, "CancelReport.reason").map(|reason| {
                    OrderEvent::Cancelled {
                        order: cancel.order,
                        account: cancel.account,
                        symbol: cancel.symbol,
                        qty_cancelled: cancel.qty_cancelled,
                        reason,
                        log_index: cancel.log_index,
                        ts: cancel.ts,
                    }
                }))
            }
            SessionEvent::Reply(_) | SessionEvent::Failed { .. } => None,
        }
    }

    /// The order the event is about.
    pub fn order(&self) -> u64 {
        match self {
            OrderEvent::Fill { order, .. } | OrderEvent::Cancelled { order, .. } => *order,
        }
    }
}

/// A session's order events, decoded. A report that does not decode is logged and
/// skipped: it is the exchange's report, not the client's request, so there is no one
/// to refuse, and inventing a side or reason for it would be worse.
pub struct OrderEvents(pub Events);

impl OrderEvents {
    /// The next order event, or `None` once the session is over.
    pub async fn recv(&mut self) -> Option<OrderEvent> {
        loop {
            match OrderEvent::decode(self.0.recv().await?) {
                Some(Ok(event)) => return Some(event),
                Some(Err(error)) => tracing::error!(%error, "an order report this version cannot read: skipped"),
                None => {}
            }
        }
    }
}

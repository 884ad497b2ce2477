//! Conversions between the wire types of `bourse.v1` ([`crate::proto`]) and the engine's.
//!
//! Engine to wire is total: `From` impls for value types (`SymbolSpec`, `OrderRequest`,
//! `CommandBody`, `Reject`, …) and functions named after the message they build for
//! anything that needs context the engine value lacks (the log index, the leader's
//! timestamp, a trade's position in its log entry): [`ack`], [`fill_reports`],
//! [`cancel_report`], [`trade_update`], [`bbo_update`] and the `*_reply` builders.
//!
//! Wire to engine checks structure only and never panics: an absent oneof or required
//! message, an enum left at its zero (`*_UNSPECIFIED`) value or holding a number this
//! version does not know, a number that cannot fit the engine's type, and a command
//! whose log record would be longer than a replica reads back
//! (`codec::COMMAND_BYTES_MAX`) are a [`ConvertError`] naming the field as
//! `Message.field`. Values the engine judges itself (negative quantities, prices off the
//! tick, unknown ids) pass through unchanged, so a client hears the engine's own
//! rejection with its stable code.
//!
//! A [`ConvertError`] becomes a [`proto::RejectInfo`] with a [`Refusal`] code from 1000
//! up ([`ConvertError::refusal`]), above every engine [`Reject`] code; [`ack_refused`] builds
//! the whole answer. Such a command never reaches the log and does not use up its seq.
//!
//! A command's envelope is split on the wire: `client_id` travels in the batch, `seq` in
//! each command, and `ts` is not sent at all: the leader stamps it, so
//! [`command_from_proto`] takes both from its caller.

use bourse_engine::codec;
use bourse_engine::command::{
    Command, CommandBody, MarginSpec, MarginSymbol, MarkSource, MatchPolicy, OrderKind, OrderRequest, Stp, SymbolSpec,
    Tif,
};
use bourse_engine::{
    AccountId, Amount, Applied, Asset, AssetId, CancelReason, ClientId, Depth, Event, Fill, OrderId, OrderStatus,
    OrderView, Outcome, Px, Qty, Reject, Side, SymbolId, Timestamp,
};

use crate::proto;
use crate::proto::client_command::Body;
use crate::proto::order_kind::Kind;
use crate::refusal::Refusal;

// -----------------------------------------------------------------------------------
// Errors
// -----------------------------------------------------------------------------------

/// A wire message that cannot be an engine value. Each variant names the offending
/// field as `Message.field`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConvertError {
    /// A oneof or a required message field was absent.
    FieldMissing { field: &'static str },
    /// An enum field held its zero (`*_UNSPECIFIED`) value.
    EnumUnspecified { field: &'static str },
    /// An enum field, or a reject code, held a number this version does not know.
    EnumUnknown { field: &'static str, value: i64 },
    /// A number does not fit the engine's type (for example `decimals` above 255).
    ValueOutOfRange { field: &'static str, value: u64 },
    /// The caller may not send this command (an administrative command from a gateway
    /// the node does not let relay them): code 1004, as a gateway refuses a key's.
    NotAuthorized { field: &'static str },
}

impl ConvertError {
    /// The offending field, as `Message.field`.
    pub fn field(&self) -> &'static str {
        match self {
            ConvertError::FieldMissing { field }
            | ConvertError::EnumUnspecified { field }
            | ConvertError::EnumUnknown { field, .. }
            | ConvertError::ValueOutOfRange { field, .. }
            | ConvertError::NotAuthorized { field } => field,
        }
    }

    /// The refusal this error is on the wire ([`Refusal`]: codes from 1000 up).
    pub fn refusal(&self) -> Refusal {
        match self {
            ConvertError::FieldMissing { .. } => Refusal::FieldMissing,
            ConvertError::EnumUnspecified { .. } => Refusal::EnumUnspecified,
            ConvertError::EnumUnknown { .. } => Refusal::EnumUnknown,
            ConvertError::ValueOutOfRange { .. } => Refusal::ValueOutOfRange,
            ConvertError::NotAuthorized { .. } => Refusal::NotAuthorized,
        }
    }

    /// The stable code this error has on the wire, from 1000 up.
    pub fn code(&self) -> u32 {
        self.refusal().code()
    }

    /// The stable snake_case name of [`ConvertError::code`].
    pub fn name(&self) -> &'static str {
        self.refusal().name()
    }
}

impl std::fmt::Display for ConvertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConvertError::FieldMissing { field } => write!(f, "{field} is missing"),
            ConvertError::EnumUnspecified { field } => write!(f, "{field} is unspecified"),
            ConvertError::EnumUnknown { field, value } => write!(f, "{field} has unknown value {value}"),
            ConvertError::ValueOutOfRange { field, value } => write!(f, "{field} value {value} is out of range"),
            ConvertError::NotAuthorized { field } => {
                write!(f, "{field}: an administrative command, from a gateway that may not relay them")
            }
        }
    }
}

impl std::error::Error for ConvertError {}

impl From<&ConvertError> for proto::RejectInfo {
    fn from(error: &ConvertError) -> Self {
        proto::RejectInfo { code: error.code(), name: error.name().to_owned(), detail: error.field().to_owned() }
    }
}

impl From<Reject> for proto::RejectInfo {
    fn from(reject: Reject) -> Self {
        proto::RejectInfo { code: u32::from(reject.code()), name: reject.name().to_owned(), detail: String::new() }
    }
}

impl TryFrom<&proto::RejectInfo> for Reject {
    type Error = ConvertError;

    /// The engine rejection with this code; a node refusal (code 1000 or more) or a code
    /// this version does not know is an error.
    fn try_from(info: &proto::RejectInfo) -> Result<Self, ConvertError> {
        u16::try_from(info.code)
            .ok()
            .and_then(Reject::from_code)
            .ok_or(ConvertError::EnumUnknown { field: "RejectInfo.code", value: i64::from(info.code) })
    }
}

fn required<'a, T>(value: &'a Option<T>, field: &'static str) -> Result<&'a T, ConvertError> {
    value.as_ref().ok_or(ConvertError::FieldMissing { field })
}

/// Reads a wire enum: zero is always `*_UNSPECIFIED`, and a number the generated enum
/// does not know is an error rather than a default.
fn wire_enum<E: TryFrom<i32>>(value: i32, field: &'static str) -> Result<E, ConvertError> {
    if value == 0 {
        return Err(ConvertError::EnumUnspecified { field });
    }
    E::try_from(value).map_err(|_| ConvertError::EnumUnknown { field, value: i64::from(value) })
}

// -----------------------------------------------------------------------------------
// Enums
// -----------------------------------------------------------------------------------

impl From<Side> for proto::Side {
    fn from(side: Side) -> Self {
        match side {
            Side::Buy => proto::Side::Buy,
            Side::Sell => proto::Side::Sell,
        }
    }
}

/// Reads a `Side` field.
pub fn side_from_proto(value: i32, field: &'static str) -> Result<Side, ConvertError> {
    match wire_enum(value, field)? {
        proto::Side::Buy => Ok(Side::Buy),
        proto::Side::Sell => Ok(Side::Sell),
        proto::Side::Unspecified => Err(ConvertError::EnumUnspecified { field }),
    }
}

impl From<Tif> for proto::Tif {
    fn from(tif: Tif) -> Self {
        match tif {
            Tif::Gtc => proto::Tif::Gtc,
            Tif::Ioc => proto::Tif::Ioc,
            Tif::Fok => proto::Tif::Fok,
            Tif::Day => proto::Tif::Day,
        }
    }
}

/// Reads a `Tif` field.
pub fn tif_from_proto(value: i32, field: &'static str) -> Result<Tif, ConvertError> {
    match wire_enum(value, field)? {
        proto::Tif::Gtc => Ok(Tif::Gtc),
        proto::Tif::Ioc => Ok(Tif::Ioc),
        proto::Tif::Fok => Ok(Tif::Fok),
        proto::Tif::Day => Ok(Tif::Day),
        proto::Tif::Unspecified => Err(ConvertError::EnumUnspecified { field }),
    }
}

impl From<Stp> for proto::Stp {
    fn from(stp: Stp) -> Self {
        match stp {
            Stp::CancelResting => proto::Stp::CancelResting,
            Stp::CancelIncoming => proto::Stp::CancelIncoming,
            Stp::Allow => proto::Stp::Allow,
        }
    }
}

/// Reads an `Stp` field. Unspecified is an error, not the engine's default, so a client
/// always says which behaviour it wants.
pub fn stp_from_proto(value: i32, field: &'static str) -> Result<Stp, ConvertError> {
    match wire_enum(value, field)? {
        proto::Stp::CancelResting => Ok(Stp::CancelResting),
        proto::Stp::CancelIncoming => Ok(Stp::CancelIncoming),
        proto::Stp::Allow => Ok(Stp::Allow),
        proto::Stp::Unspecified => Err(ConvertError::EnumUnspecified { field }),
    }
}

impl From<MatchPolicy> for proto::MatchPolicy {
    fn from(policy: MatchPolicy) -> Self {
        match policy {
            MatchPolicy::Fifo => proto::MatchPolicy::Fifo,
            MatchPolicy::ProRata => proto::MatchPolicy::ProRata,
        }
    }
}

/// Reads a `MatchPolicy` field.
pub fn match_policy_from_proto(value: i32, field: &'static str) -> Result<MatchPolicy, ConvertError> {
    match wire_enum(value, field)? {
        proto::MatchPolicy::Fifo => Ok(MatchPolicy::Fifo),
        proto::MatchPolicy::ProRata => Ok(MatchPolicy::ProRata),
        proto::MatchPolicy::Unspecified => Err(ConvertError::EnumUnspecified { field }),
    }
}

impl From<CancelReason> for proto::CancelReason {
    fn from(reason: CancelReason) -> Self {
        match reason {
            CancelReason::Requested => proto::CancelReason::Requested,
            CancelReason::Unfilled => proto::CancelReason::Unfilled,
            CancelReason::BudgetExhausted => proto::CancelReason::BudgetExhausted,
            CancelReason::SelfTrade => proto::CancelReason::SelfTrade,
            CancelReason::ReducedToZero => proto::CancelReason::ReducedToZero,
            CancelReason::Expired => proto::CancelReason::Expired,
            CancelReason::Liquidation => proto::CancelReason::Liquidation,
        }
    }
}

/// Reads a `CancelReason` field.
pub fn cancel_reason_from_proto(value: i32, field: &'static str) -> Result<CancelReason, ConvertError> {
    match wire_enum(value, field)? {
        proto::CancelReason::Requested => Ok(CancelReason::Requested),
        proto::CancelReason::Unfilled => Ok(CancelReason::Unfilled),
        proto::CancelReason::BudgetExhausted => Ok(CancelReason::BudgetExhausted),
        proto::CancelReason::SelfTrade => Ok(CancelReason::SelfTrade),
        proto::CancelReason::ReducedToZero => Ok(CancelReason::ReducedToZero),
        proto::CancelReason::Expired => Ok(CancelReason::Expired),
        proto::CancelReason::Liquidation => Ok(CancelReason::Liquidation),
        proto::CancelReason::Unspecified => Err(ConvertError::EnumUnspecified { field }),
    }
}

impl From<OrderStatus> for proto::OrderStatus {
    fn from(status: OrderStatus) -> Self {
        match status {
            OrderStatus::Pending => proto::OrderStatus::Pending,
            OrderStatus::Open => proto::OrderStatus::Open,
            OrderStatus::Filled => proto::OrderStatus::Filled,
            OrderStatus::Cancelled => proto::OrderStatus::Cancelled,
            OrderStatus::Expired => proto::OrderStatus::Expired,
        }
    }
}

/// Reads an `OrderStatus` field.
pub fn order_status_from_proto(value: i32, field: &'static str) -> Result<OrderStatus, ConvertError> {
    match wire_enum(value, field)? {
        proto::OrderStatus::Pending => Ok(OrderStatus::Pending),
        proto::OrderStatus::Open => Ok(OrderStatus::Open),
        proto::OrderStatus::Filled => Ok(OrderStatus::Filled),
        proto::OrderStatus::Cancelled => Ok(OrderStatus::Cancelled),
        proto::OrderStatus::Expired => Ok(OrderStatus::Expired),
        proto::OrderStatus::Unspecified => Err(ConvertError::EnumUnspecified { field }),
    }
}

fn side_wire(side: Side) -> i32 {
    proto::Side::from(side) as i32
}

// -----------------------------------------------------------------------------------
// Commands
// -----------------------------------------------------------------------------------

impl From<&SymbolSpec> for proto::SymbolSpec {
    fn from(spec: &SymbolSpec) -> Self {
        proto::SymbolSpec {
            name: spec.name.clone(),
            base: spec.base.0,
            quote: spec.quote.0,
            tick: spec.tick.0,
            lot: spec.lot.0,
            px_min: spec.px_min.0,
            px_max: spec.px_max.0,
            fee_maker: spec.fee_maker.0,
            fee_taker: spec.fee_taker.0,
            policy: proto::MatchPolicy::from(spec.policy) as i32,
            margin: None,
        }
    }
}

impl From<&MarginSpec> for proto::MarginSpec {
    fn from(margin: &MarginSpec) -> Self {
        proto::MarginSpec {
            initial_bp: margin.initial_bp,
            maintenance_bp: margin.maintenance_bp,
            multiplier: margin.multiplier,
            position_limit: margin.position_limit.0,
            mark: match margin.mark {
                MarkSource::Operator => proto::MarkSource::Operator,
                MarkSource::LastTrade => proto::MarkSource::LastTrade,
            } as i32,
            insurance: margin.insurance.0,
        }
    }
}

impl TryFrom<&proto::MarginSpec> for MarginSpec {
    type Error = ConvertError;

    fn try_from(margin: &proto::MarginSpec) -> Result<Self, ConvertError> {
        let mark = match wire_enum(margin.mark, "MarginSpec.mark")? {
            proto::MarkSource::Operator => MarkSource::Operator,
            proto::MarkSource::LastTrade => MarkSource::LastTrade,
            proto::MarkSource::Unspecified => return Err(ConvertError::EnumUnspecified { field: "MarginSpec.mark" }),
        };
        Ok(MarginSpec {
            initial_bp: margin.initial_bp,
            maintenance_bp: margin.maintenance_bp,
            multiplier: margin.multiplier,
            position_limit: Qty(margin.position_limit),
            mark,
            insurance: AccountId(margin.insurance),
        })
    }
}

/// A symbol's wire definition as the engine holds it, margin rules included.
pub fn symbol_spec_wire<B: bourse_engine::book::Book>(
    engine: &bourse_engine::Engine<B>,
    symbol: SymbolId,
) -> Option<proto::SymbolSpec> {
    let mut spec: proto::SymbolSpec = engine.symbol_spec(symbol)?.into();
    spec.margin = engine.symbol_margin(symbol).map(Into::into);
    Some(spec)
}

impl TryFrom<&proto::SymbolSpec> for SymbolSpec {
    type Error = ConvertError;

    fn try_from(spec: &proto::SymbolSpec) -> Result<Self, ConvertError> {
        Ok(SymbolSpec {
            name: spec.name.clone(),
            base: AssetId(spec.base),
            quote: AssetId(spec.quote),
            tick: Px(spec.tick),
            lot: Qty(spec.lot),
            px_min: Px(spec.px_min),
            px_max: Px(spec.px_max),
            fee_maker: Amount(spec.fee_maker),
            fee_taker: Amount(spec.fee_taker),
            policy: match_policy_from_proto(spec.policy, "SymbolSpec.policy")?,
        })
    }
}

impl From<OrderKind> for proto::OrderKind {
    fn from(kind: OrderKind) -> Self {
        let kind = match kind {
            OrderKind::Limit { px } => Kind::Limit(proto::order_kind::Limit { px: px.0 }),
            OrderKind::Market { budget } => Kind::Market(proto::order_kind::Market { budget: budget.map(|b| b.0) }),
            OrderKind::StopLimit { trigger, px } => {
                Kind::StopLimit(proto::order_kind::StopLimit { trigger: trigger.0, px: px.0 })
            }
            OrderKind::StopMarket { trigger, budget } => {
                Kind::StopMarket(proto::order_kind::StopMarket { trigger: trigger.0, budget: budget.map(|b| b.0) })
            }
        };
        proto::OrderKind { kind: Some(kind) }
    }
}

impl TryFrom<&proto::OrderKind> for OrderKind {
    type Error = ConvertError;

    fn try_from(kind: &proto::OrderKind) -> Result<Self, ConvertError> {
        Ok(match required(&kind.kind, "OrderKind.kind")? {
            Kind::Limit(limit) => OrderKind::Limit { px: Px(limit.px) },
            Kind::Market(market) => OrderKind::Market { budget: market.budget.map(Amount) },
            Kind::StopLimit(stop) => OrderKind::StopLimit { trigger: Px(stop.trigger), px: Px(stop.px) },
            Kind::StopMarket(stop) => {
                OrderKind::StopMarket { trigger: Px(stop.trigger), budget: stop.budget.map(Amount) }
            }
        })
    }
}

impl From<&OrderRequest> for proto::OrderRequest {
    fn from(request: &OrderRequest) -> Self {
        proto::OrderRequest {
            account: request.account.0,
            symbol: request.symbol.0,
            side: side_wire(request.side),
            kind: Some(request.kind.into()),
            qty: request.qty.0,
            tif: proto::Tif::from(request.tif) as i32,
            post_only: request.post_only,
            display_qty: request.display_qty.map(|q| q.0),
            stp: proto::Stp::from(request.stp) as i32,
        }
    }
}

impl TryFrom<&proto::OrderRequest> for OrderRequest {
    type Error = ConvertError;

    fn try_from(request: &proto::OrderRequest) -> Result<Self, ConvertError> {
        Ok(OrderRequest {
            account: AccountId(request.account),
            symbol: SymbolId(request.symbol),
            side: side_from_proto(request.side, "OrderRequest.side")?,
            kind: OrderKind::try_from(required(&request.kind, "OrderRequest.kind")?)?,
            qty: Qty(request.qty),
            tif: tif_from_proto(request.tif, "OrderRequest.tif")?,
            post_only: request.post_only,
            display_qty: request.display_qty.map(Qty),
            stp: stp_from_proto(request.stp, "OrderRequest.stp")?,
        })
    }
}

fn balance_change(account: AccountId, asset: AssetId, amount: Amount) -> proto::BalanceChange {
    proto::BalanceChange { account: account.0, asset: asset.0, amount: amount.0 }
}

impl From<&CommandBody> for Body {
    fn from(body: &CommandBody) -> Self {
        match body {
            CommandBody::CreateAsset { name, decimals } => {
                Body::CreateAsset(proto::CreateAsset { name: name.clone(), decimals: u32::from(*decimals) })
            }
            CommandBody::CreateSymbol(spec) => Body::CreateSymbol(spec.as_ref().into()),
            CommandBody::CreateAccount => Body::CreateAccount(proto::CreateAccount {}),
            CommandBody::Deposit { account, asset, amount } => Body::Deposit(balance_change(*account, *asset, *amount)),
            CommandBody::Withdraw { account, asset, amount } => {
                Body::Withdraw(balance_change(*account, *asset, *amount))
            }
            CommandBody::Credit { account, asset, amount } => Body::Credit(balance_change(*account, *asset, *amount)),
            CommandBody::SuspendAccount { account } => Body::SuspendAccount(proto::AccountRef { account: account.0 }),
            CommandBody::ResumeAccount { account } => Body::ResumeAccount(proto::AccountRef { account: account.0 }),
            CommandBody::Place(request) => Body::Place(request.into()),
            CommandBody::Cancel { account, symbol, order } => {
                Body::Cancel(proto::CancelOrder { account: account.0, symbol: symbol.0, order: order.0 })
            }
            CommandBody::Reduce { account, symbol, order, qty_by } => Body::Reduce(proto::ReduceOrder {
                account: account.0,
                symbol: symbol.0,
                order: order.0,
                qty_by: qty_by.0,
            }),
            CommandBody::Move { account, symbol, order, px } => {
                Body::Move(proto::MoveOrder { account: account.0, symbol: symbol.0, order: order.0, px: px.0 })
            }
            CommandBody::CreateAccountWithId { external_id, asset, deposit } => {
                Body::CreateAccountWithId(proto::CreateAccountWithId {
                    external_id: *external_id,
                    asset: asset.0,
                    deposit: deposit.0,
                })
            }
            CommandBody::CloseDay => Body::CloseDay(proto::CloseDay {}),
            CommandBody::DayTrading(request) => crate::daytrading::body_wire(request),
            CommandBody::SetFairness(setting) => {
                Body::SetFairness(proto::SetFairness { hold_ns: setting.hold_ns, window_ns: setting.window_ns })
            }
            CommandBody::CreateMarginSymbol(symbol) => {
                let mut spec: proto::SymbolSpec = (&symbol.spec).into();
                spec.margin = Some((&symbol.margin).into());
                Body::CreateSymbol(spec)
            }
            CommandBody::SetMark { symbol, px } => Body::SetMark(proto::SetMark { symbol: symbol.0, px: px.0 }),
        }
    }
}

impl TryFrom<&Body> for CommandBody {
    type Error = ConvertError;

    /// The engine body of a wire body; one whose log record would be too long for a
    /// replica to read back ([`fits_the_log`]) is refused.
    fn try_from(body: &Body) -> Result<Self, ConvertError> {
        fits_the_log(body_from_wire(body)?)
    }
}

/// Refuses a body that, with the widest envelope (client, seq and stamp at their
/// largest), encodes to more than [`codec::COMMAND_BYTES_MAX`]: the node would log it and
/// then no replica, nor its own replay, could decode the record. Only bodies with strings
/// can be that long; the others are passed without encoding them.
fn fits_the_log(body: CommandBody) -> Result<CommandBody, ConvertError> {
    let has_strings = match &body {
        CommandBody::CreateAsset { .. }
        | CommandBody::CreateSymbol(_)
        | CommandBody::CreateMarginSymbol(_)
        | CommandBody::DayTrading(_) => true,
        CommandBody::CreateAccount
        | CommandBody::Deposit { .. }
        | CommandBody::Withdraw { .. }
        | CommandBody::Credit { .. }
        | CommandBody::SuspendAccount { .. }
        | CommandBody::ResumeAccount { .. }
        | CommandBody::Place(_)
        | CommandBody::Cancel { .. }
        | CommandBody::Reduce { .. }
        | CommandBody::Move { .. }
        | CommandBody::CreateAccountWithId { .. }
        | CommandBody::CloseDay
        | CommandBody::SetFairness(_)
        | CommandBody::SetMark { .. } => false,
    };
    if !has_strings {
        return Ok(body);
    }
    let widest = Command { client: ClientId(u64::MAX), seq: u64::MAX, ts: Timestamp::MAX, body };
    let len = codec::encode(&widest).len();
    if len > codec::COMMAND_BYTES_MAX {
        return Err(ConvertError::ValueOutOfRange { field: "ClientCommand.body", value: len as u64 });
    }
    Ok(widest.body)
}

fn body_from_wire(body: &Body) -> Result<CommandBody, ConvertError> {
    Ok(match body {
        Body::CreateAsset(create) => CommandBody::CreateAsset {
            name: create.name.clone(),
            decimals: u8::try_from(create.decimals).map_err(|_| ConvertError::ValueOutOfRange {
                field: "CreateAsset.decimals",
                value: u64::from(create.decimals),
            })?,
        },
        Body::CreateSymbol(wire) => {
            let spec: SymbolSpec = wire.try_into()?;
            match &wire.margin {
                Some(margin) => {
                    CommandBody::CreateMarginSymbol(Box::new(MarginSymbol { spec, margin: margin.try_into()? }))
                }
                None => CommandBody::CreateSymbol(Box::new(spec)),
            }
        }
        Body::SetMark(mark) => CommandBody::SetMark { symbol: SymbolId(mark.symbol), px: Px(mark.px) },
        Body::CreateAccount(_) => CommandBody::CreateAccount,
        Body::Deposit(change) => CommandBody::Deposit {
            account: AccountId(change.account),
            asset: AssetId(change.asset),
            amount: Amount(change.amount),
        },
        Body::Withdraw(change) => CommandBody::Withdraw {
            account: AccountId(change.account),
            asset: AssetId(change.asset),
            amount: Amount(change.amount),
        },
        Body::Credit(change) => CommandBody::Credit {
            account: AccountId(change.account),
            asset: AssetId(change.asset),
            amount: Amount(change.amount),
        },
        Body::SuspendAccount(target) => CommandBody::SuspendAccount { account: AccountId(target.account) },
        Body::ResumeAccount(target) => CommandBody::ResumeAccount { account: AccountId(target.account) },
        Body::Place(request) => CommandBody::Place(request.try_into()?),
        Body::Cancel(cancel) => CommandBody::Cancel {
            account: AccountId(cancel.account),
            symbol: SymbolId(cancel.symbol),
            order: OrderId(cancel.order),
        },
        Body::Reduce(reduce) => CommandBody::Reduce {
            account: AccountId(reduce.account),
            symbol: SymbolId(reduce.symbol),
            order: OrderId(reduce.order),
            qty_by: Qty(reduce.qty_by),
        },
        Body::Move(moved) => CommandBody::Move {
            account: AccountId(moved.account),
            symbol: SymbolId(moved.symbol),
            order: OrderId(moved.order),
            px: Px(moved.px),
        },
        Body::CreateAccountWithId(create) => CommandBody::CreateAccountWithId {
            external_id: create.external_id,
            asset: AssetId(create.asset),
            deposit: Amount(create.deposit),
        },
        Body::CloseDay(_) => CommandBody::CloseDay,
        Body::SetFairness(setting) => CommandBody::SetFairness(bourse_engine::command::FairnessSetting {
            hold_ns: setting.hold_ns,
            window_ns: setting.window_ns,
        }),
        Body::DayTrading(command) => {
            CommandBody::DayTrading(Box::new(bourse_engine::daytrading::DtRequest::Command(command.try_into()?)))
        }
        Body::DayTradingQuote(quote) => {
            CommandBody::DayTrading(Box::new(bourse_engine::daytrading::DtRequest::Quote(quote.try_into()?)))
        }
    })
}

/// The wire form of one command of a client: its `seq` and body. The client id travels
/// in the enclosing batch and the timestamp is the leader's, so neither is here.
impl From<&Command> for proto::ClientCommand {
    fn from(command: &Command) -> Self {
        proto::ClientCommand { seq: command.seq, body: Some((&command.body).into()) }
    }
}

/// The Admin form of one command: client id, seq and body (the timestamp is the leader's).
impl From<&Command> for proto::SubmitRequest {
    fn from(command: &Command) -> Self {
        proto::SubmitRequest { client_id: command.client.0, command: Some(command.into()) }
    }
}

/// The engine command for a wire command of `client`, stamped with the leader's `ts`.
pub fn command_from_proto(
    client: ClientId,
    ts: Timestamp,
    command: &proto::ClientCommand,
) -> Result<Command, ConvertError> {
    let body = CommandBody::try_from(required(&command.body, "ClientCommand.body")?)?;
    Ok(Command { client, seq: command.seq, ts, body })
}

/// The engine command for an Admin `Submit`, stamped with the leader's `ts`.
pub fn command_from_submit(ts: Timestamp, request: &proto::SubmitRequest) -> Result<Command, ConvertError> {
    command_from_proto(ClientId(request.client_id), ts, required(&request.command, "SubmitRequest.command")?)
}

// -----------------------------------------------------------------------------------
// Acks, fills, cancellations
// -----------------------------------------------------------------------------------

impl From<Outcome> for proto::ack::Outcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Ok { id } => proto::ack::Outcome::OkId(id),
            Outcome::Rejected(reject) => proto::ack::Outcome::Rejected(reject.into()),
        }
    }
}

/// The answer to the command with `seq`, applied (or found a duplicate) at `log_index`.
pub fn ack(seq: u64, log_index: u64, applied: &Applied) -> proto::Ack {
    proto::Ack {
        seq,
        log_index,
        duplicate: applied.duplicate,
        outcome: Some(applied.outcome.into()),
        gateway_ts: 0,
        day_trading: None,
    }
}

/// The answer to a command the node refused before the log because its shape was wrong.
/// `log_index` is 0: the command was never logged and its `seq` is not used up.
pub fn ack_refused(seq: u64, error: &ConvertError) -> proto::Ack {
    proto::Ack {
        seq,
        log_index: 0,
        duplicate: false,
        outcome: Some(proto::ack::Outcome::Rejected(error.into())),
        gateway_ts: 0,
        day_trading: None,
    }
}

/// The engine outcome an ack carries. A node refusal (code 1000 or more) has no engine
/// outcome and is an error: read [`proto::RejectInfo`] directly to tell those apart.
pub fn outcome_from_ack(ack: &proto::Ack) -> Result<Outcome, ConvertError> {
    match required(&ack.outcome, "Ack.outcome")? {
        proto::ack::Outcome::OkId(id) => Ok(Outcome::Ok { id: *id }),
        proto::ack::Outcome::Rejected(info) => Ok(Outcome::Rejected(info.try_into()?)),
    }
}

/// Where an event happened: the log entry whose command caused it and that entry's
/// timestamp (the leader's stamp, which the engine event itself does not carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LogPosition {
    pub log_index: u64,
    pub ts: Timestamp,
}

/// The two reports of an [`Event::Trade`], maker's first, taker's second; `None` for any
/// other event. `trade_seq` is the trade's position among the trades of its log entry,
/// from 0: with the log index it identifies the trade.
pub fn fill_reports(event: &Event, at: LogPosition, trade_seq: u32) -> Option<[proto::FillReport; 2]> {
    let Event::Trade {
        symbol,
        px,
        qty,
        taker_side,
        maker_order,
        taker_order,
        maker_account,
        taker_account,
        fee_maker,
        fee_taker,
        maker_done: _,
    } = *event
    else {
        return None;
    };
    let report = |order: OrderId, account: AccountId, side: Side, fee: Amount, maker: bool, counter: OrderId| {
        proto::FillReport {
            order: order.0,
            account: account.0,
            symbol: symbol.0,
            side: side_wire(side),
            px: px.0,
            qty: qty.0,
            fee: fee.0,
            maker,
            counter_order: counter.0,
            log_index: at.log_index,
            trade_seq,
            ts: at.ts,
        }
    };
    Some([
        report(maker_order, maker_account, taker_side.opposite(), fee_maker, true, taker_order),
        report(taker_order, taker_account, taker_side, fee_taker, false, maker_order),
    ])
}

/// The report of an [`Event::Cancelled`]; `None` for any other event. The event names
/// only the order, so the caller supplies its account and symbol (from the order's
/// `Accepted` event or its record).
pub fn cancel_report(
    event: &Event,
    account: AccountId,
    symbol: SymbolId,
    at: LogPosition,
) -> Option<proto::CancelReport> {
    let Event::Cancelled { order, qty_cancelled, reason } = *event else {
        return None;
    };
    Some(proto::CancelReport {
        order: order.0,
        account: account.0,
        symbol: symbol.0,
        qty_cancelled: qty_cancelled.0,
        reason: proto::CancelReason::from(reason) as i32,
        log_index: at.log_index,
        ts: at.ts,
    })
}

// -----------------------------------------------------------------------------------
// Market data
// -----------------------------------------------------------------------------------

/// The public side of an [`Event::Trade`]; `None` for any other event. The timestamp
/// goes in the enclosing [`proto::MarketDataUpdate`].
pub fn trade_update(event: &Event, log_index: u64, trade_seq: u32) -> Option<proto::TradeUpdate> {
    let Event::Trade { symbol, px, qty, taker_side, .. } = *event else {
        return None;
    };
    Some(proto::TradeUpdate {
        symbol: symbol.0,
        px: px.0,
        qty: qty.0,
        taker_side: side_wire(taker_side),
        log_index,
        trade_seq,
    })
}

/// The best bid and offer of `symbol` from its depth (only the first level a side is
/// read, so `engine.depth(symbol, 1)` is enough).
pub fn bbo_update(symbol: SymbolId, depth: &Depth, log_index: u64) -> proto::BboUpdate {
    let bid = depth.bids.first();
    let ask = depth.asks.first();
    proto::BboUpdate {
        symbol: symbol.0,
        bid_px: bid.map(|(px, _)| px.0),
        bid_qty: bid.map_or(0, |(_, qty)| qty.0),
        ask_px: ask.map(|(px, _)| px.0),
        ask_qty: ask.map_or(0, |(_, qty)| qty.0),
        log_index,
    }
}

// -----------------------------------------------------------------------------------
// Queries
// -----------------------------------------------------------------------------------

impl From<&Fill> for proto::Fill {
    fn from(fill: &Fill) -> Self {
        proto::Fill {
            px: fill.px.0,
            qty: fill.qty.0,
            fee: fill.fee.0,
            maker: fill.maker,
            counter_order: fill.counter_order.0,
            ts: fill.ts,
        }
    }
}

impl From<&OrderView> for proto::OrderInfo {
    fn from(view: &OrderView) -> Self {
        let record = &view.record;
        proto::OrderInfo {
            id: record.id.0,
            account: record.account.0,
            symbol: record.symbol.0,
            side: side_wire(record.side),
            kind: Some(record.kind.into()),
            tif: proto::Tif::from(record.tif) as i32,
            qty: record.qty.0,
            qty_filled: record.qty_filled.0,
            qty_reduced: record.qty_reduced.0,
            status: proto::OrderStatus::from(record.status) as i32,
            ts: record.ts,
            fills: record.fills.iter().map(Into::into).collect(),
            px_resting: view.px_resting.map(|px| px.0),
            qty_open: view.qty_open.0,
            qty_visible: view.qty_visible.0,
            ts_closed: record.ts_closed,
            qty_cancelled: view.qty_cancelled.0,
        }
    }
}

/// The reply to `GetOrder`, read at `log_index`.
pub fn order_reply(log_index: u64, view: &OrderView) -> proto::GetOrderReply {
    proto::GetOrderReply { log_index, order: Some(view.into()) }
}

/// The reply to `GetOpenOrders`, read at `log_index` (views as `engine.open_orders`
/// returns them: by order id).
pub fn open_orders_reply(log_index: u64, views: &[OrderView]) -> proto::GetOpenOrdersReply {
    proto::GetOpenOrdersReply { log_index, orders: views.iter().map(Into::into).collect() }
}

/// The reply to `GetBalances`, read at `log_index` (balances as `engine.balances`
/// returns them: by asset id).
pub fn balances_reply(
    log_index: u64,
    balances: &[(AssetId, bourse_engine::account::Balance)],
) -> proto::GetBalancesReply {
    let balances = balances
        .iter()
        .map(|(asset, balance)| proto::AssetBalance {
            asset: asset.0,
            available: balance.available.0,
            reserved: balance.reserved.0,
        })
        .collect();
    proto::GetBalancesReply { log_index, balances }
}

/// An `i128` report figure on the wire's `int64`, saturated (the engine's bounds keep
/// real figures far inside it).
fn wide(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}

/// The reply to `GetAccountReport`, read at `log_index`; `None` for an unknown account.
pub fn account_report_reply<B: bourse_engine::book::Book>(
    engine: &bourse_engine::Engine<B>,
    log_index: u64,
    account: AccountId,
    open_orders_max: usize,
) -> Option<proto::GetAccountReportReply> {
    let balances = balances_reply(log_index, engine.balances(account)?).balances;
    let positions = engine
        .position_reports(account)?
        .iter()
        .map(|p| proto::PositionInfo {
            symbol: p.symbol.0,
            size: p.size,
            cost: p.cost,
            realized: p.realized,
            buying: p.buying,
            selling: p.selling,
            mark: p.mark.map(|m| m.0),
            unrealized: wide(p.unrealized),
            initial_margin: wide(p.initial_margin),
            maintenance_margin: wide(p.maintenance_margin),
            liquidation_px: p.liquidation_px.and_then(|t| i64::try_from(t).ok()),
        })
        .collect();
    let margin = engine
        .margin_summaries(account)?
        .iter()
        .map(|m| proto::MarginSummary {
            asset: m.asset.0,
            cash: wide(m.cash),
            unrealized: wide(m.unrealized),
            equity: wide(m.equity),
            initial_margin: wide(m.initial_margin),
            maintenance_margin: wide(m.maintenance_margin),
            free_margin: wide(m.free_margin),
        })
        .collect();
    let mut views = engine.open_orders(account);
    views.truncate(open_orders_max);
    Some(proto::GetAccountReportReply {
        log_index,
        account: account.0,
        balances,
        positions,
        margin,
        open_orders: views.iter().map(Into::into).collect(),
    })
}

/// The reply to `GetExchangeReport`, read at `log_index`.
pub fn exchange_report_reply(
    log_index: u64,
    report: &bourse_engine::margin::ExchangeReport,
) -> proto::GetExchangeReportReply {
    proto::GetExchangeReportReply {
        log_index,
        days_closed: report.days_closed,
        assets: report
            .assets
            .iter()
            .map(|a| proto::AssetTotals {
                asset: a.asset.0,
                supply: a.supply,
                available: wide(a.available),
                reserved: wide(a.reserved),
                fees: a.fees,
                bad_debt: a.bad_debt,
                open_cost: wide(a.open_cost),
                balanced: a.balanced(),
            })
            .collect(),
        symbols: report
            .symbols
            .iter()
            .map(|s| proto::OpenInterest {
                symbol: s.symbol.0,
                mark: s.mark.map(|m| m.0),
                open_interest: s.open_interest,
                longs: s.longs,
                shorts: s.shorts,
            })
            .collect(),
    }
}

fn levels(levels: &[(Px, Qty)]) -> Vec<proto::Level> {
    levels.iter().map(|(px, qty)| proto::Level { px: px.0, qty: qty.0 }).collect()
}

/// The reply to `GetDepth`, read at `log_index`.
pub fn depth_reply(log_index: u64, symbol: SymbolId, depth: &Depth, last_px: Option<Px>) -> proto::GetDepthReply {
    proto::GetDepthReply {
        log_index,
        symbol: symbol.0,
        bids: levels(&depth.bids),
        asks: levels(&depth.asks),
        last_px: last_px.map(|px| px.0),
    }
}

/// The reply to `GetSymbols`, read at `log_index`.
pub fn symbols_reply<'a>(
    log_index: u64,
    symbols: impl IntoIterator<Item = (SymbolId, &'a SymbolSpec)>,
) -> proto::GetSymbolsReply {
    let symbols =
        symbols.into_iter().map(|(id, spec)| proto::SymbolInfo { id: id.0, spec: Some(spec.into()) }).collect();
    proto::GetSymbolsReply { log_index, symbols }
}

/// The reply to `GetAccount`, read at `log_index`.
pub fn account_reply(log_index: u64, account: AccountId, external_id: u64) -> proto::GetAccountReply {
    proto::GetAccountReply { log_index, account: account.0, external_id }
}

/// The reply to `GetAssets`, read at `log_index`.
pub fn assets_reply<'a>(
    log_index: u64,
    assets: impl IntoIterator<Item = (AssetId, &'a Asset)>,
) -> proto::GetAssetsReply {
    let assets = assets
        .into_iter()
        .map(|(id, asset)| proto::AssetInfo {
            id: id.0,
            name: asset.name.clone(),
            decimals: u32::from(asset.decimals),
            supply: asset.supply.0,
            fees_collected: asset.fees.0,
        })
        .collect();
    proto::GetAssetsReply { log_index, assets }
}

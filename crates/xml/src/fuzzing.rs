//! The fuzz entry points (`crates/xml/fuzz`, `make fuzz`), also run over their corpora
//! on stable by `tests/fuzz_corpus.rs`:
//! - [`parse_and_answer`] (target `parse`): any bytes as a request body are parsed, every
//!   value the request carries goes through the value grammars, and the reply built from
//!   it (echoing every value) must itself be a well-formed document;
//! - [`frames`] (target `framing`): any bytes as a connection's stream, read by the
//!   framing reader, which must agree with an independent reading of the spec's grammar;
//! - [`execute_checks`] (target `execute`): any bytes as a request body, parsed, then
//!   every child through the checks `execute` makes before anything is sent upstream,
//!   and what passes to the command it would send.
//!
//! Never a panic. What `execute` does after its checks needs the exchange (account and
//! symbol lookups, the commands' outcomes, order queries) and is not fuzzed here: the
//! exchange's answers are stood in for (every name is found, every command accepted).

use crate::parse::{parse, CreateChild, Request, RequestError, SymbolChild, TxChild};
use crate::reply::{self, Item, OrderReport};
use crate::value::{self, Scales};

/// Runs one body through the parser and the reply writer; panics on any broken rule.
pub fn parse_and_answer(data: &[u8]) {
    let document = match parse(data, 1_000) {
        Ok(request) => reply::document(&echo(request)),
        Err(error) => reply::request_error(&error.to_string()),
    };
    // The reply is well-formed XML: read back, its root is one this parser does not serve.
    assert_eq!(parse(&document, 100_000), Err(RequestError::UnknownRoot("results".into())), "a reply did not parse");
}

/// One error per value the request carried, echoing it, after the value grammars ran.
fn echo(request: Request) -> Vec<Item> {
    let mut values: Vec<(&'static str, String)> = Vec::new();
    match request {
        Request::Create(children) => {
            for child in children {
                match child {
                    CreateChild::Account { id, balance } => {
                        values.extend(id.map(|v| ("id", v)));
                        values.extend(balance.map(|v| ("balance", v)));
                    }
                    CreateChild::Symbol { sym, accounts } => {
                        values.extend(sym.map(|v| ("sym", v)));
                        for account in accounts {
                            if let SymbolChild::Account { id, shares } = account {
                                values.extend(id.map(|v| ("id", v)));
                                values.push(("shares", shares));
                            }
                        }
                    }
                    CreateChild::Unknown(name) => values.push(("name", name)),
                }
            }
        }
        Request::Transactions { id, children } => {
            values.push(("id", id));
            for child in children {
                match child {
                    TxChild::Order { sym, amount, limit } => {
                        values.extend(sym.map(|v| ("sym", v)));
                        values.extend(amount.map(|v| ("amount", v)));
                        values.extend(limit.map(|v| ("limit", v)));
                    }
                    TxChild::Query { id } | TxChild::Cancel { id } => values.extend(id.map(|v| ("id", v))),
                    TxChild::Unknown(name) => values.push(("name", name)),
                }
            }
        }
    }
    values
        .into_iter()
        .map(|(name, text)| {
            let _ = (value::account_id(&text), value::symbol(&text), value::transaction_id(&text));
            for scale in [0, 4, 8, 18] {
                if let Some(units) = value::decimal(&text, scale, true) {
                    let _ = value::format_scaled(units, scale);
                }
            }
            Item::Error { attrs: vec![(name, text.clone())], text }
        })
        .collect()
}

// ----------------------------------------------------------------------------------------
// The framing reader (`framing` target)
// ----------------------------------------------------------------------------------------

/// The size caps and read sizes [`frames`] picks from.
const CAPS: [usize; 6] = [0, 1, 5, 100, 4_096, 4 << 20];
const CHUNKS: [usize; 7] = [1, 2, 3, 7, 64, 4_096, usize::MAX];

/// The framing reader on arbitrary bytes: `data[0]` picks the size cap and how many
/// bytes each read of the connection returns (so the reader's buffer boundaries fall
/// anywhere), the rest is the connection's stream. The requests read and the error that
/// ends the stream must be those of an independent reading of the spec's grammar
/// (section 2.2); every body read, framed as a reply, reads back. Returns how many
/// requests were read.
pub fn frames(data: &[u8]) -> usize {
    use crate::framing::{prefixed, FrameReader};
    let (&choice, stream) = data.split_first().unwrap_or((&0, &[]));
    let cap = CAPS[usize::from(choice) % CAPS.len()];
    let chunk = CHUNKS[usize::from(choice) / CAPS.len() % CHUNKS.len()];
    let long = std::time::Duration::from_secs(60);
    let (bodies, end) = RUNTIME.with(|runtime| {
        runtime.block_on(async {
            let mut reader = FrameReader::new(Trickle { data: stream, chunk });
            let mut bodies = Vec::new();
            loop {
                match reader.next(cap, long, long).await {
                    Ok(body) => bodies.push(body),
                    Err(error) => return (bodies, error),
                }
            }
        })
    });
    let (expected, expected_end) = frames_model(stream, cap);
    assert_eq!(bodies, expected, "the requests read");
    assert_eq!(end, expected_end, "the error that ends the stream");
    assert!(bodies.iter().map(Vec::len).sum::<usize>() <= stream.len());
    for body in &bodies {
        assert!(body.len() <= cap, "a body above the cap was read");
        let framed = prefixed(body);
        let (again, _) = frames_model(&framed, usize::MAX);
        assert_eq!(again, std::slice::from_ref(body), "a reply framed like a request reads back");
    }
    bodies.len()
}

/// The spec's framing read directly off the bytes: the bodies, and why the stream ends.
fn frames_model(mut input: &[u8], cap: usize) -> (Vec<Vec<u8>>, crate::framing::FrameError) {
    use crate::framing::{FrameError, LENGTH_LINE_MAX};
    let mut bodies = Vec::new();
    loop {
        if input.is_empty() {
            return (bodies, FrameError::Closed);
        }
        // `[0-9]+ \r? \n` within the first 20 bytes; a byte the reader would need but
        // the stream lacks is a truncation.
        let digits = input.iter().take(LENGTH_LINE_MAX).take_while(|b| b.is_ascii_digit()).count();
        let line = match (digits, input.get(digits), input.get(digits + 1)) {
            (0, _, _) => return (bodies, FrameError::MalformedLength),
            (LENGTH_LINE_MAX, _, _) => return (bodies, FrameError::MalformedLength),
            (_, None, _) => return (bodies, FrameError::Truncated),
            (_, Some(b'\n'), _) => digits + 1,
            (_, Some(b'\r'), _) if digits + 1 == LENGTH_LINE_MAX => return (bodies, FrameError::MalformedLength),
            (_, Some(b'\r'), None) => return (bodies, FrameError::Truncated),
            (_, Some(b'\r'), Some(b'\n')) => digits + 2,
            _ => return (bodies, FrameError::MalformedLength),
        };
        let length: u128 = std::str::from_utf8(&input[..digits]).expect("digits").parse().expect("19 digits at most");
        if length > cap as u128 {
            return (bodies, FrameError::TooLarge);
        }
        let rest = &input[line..];
        let Some(body) = rest.get(..length as usize) else { return (bodies, FrameError::Truncated) };
        bodies.push(body.to_vec());
        input = &rest[length as usize..];
    }
}

thread_local! {
    /// The runtime [`frames`] reads in (the reader's timeouts need a timer).
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
}

/// A connection whose reads return at most `chunk` bytes each.
struct Trickle<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl tokio::io::AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = self.chunk.min(self.data.len()).min(buf.remaining());
        let (now, later) = self.data.split_at(n);
        buf.put_slice(now);
        self.data = later;
        std::task::Poll::Ready(Ok(()))
    }
}

// ----------------------------------------------------------------------------------------
// Execution's checks (`execute` target)
// ----------------------------------------------------------------------------------------

/// Scales [`execute_checks`] runs each request under: the protocol's default and others
/// a deployment may choose (cash decimals at most 18).
const SCALES: [Scales; 5] = [
    Scales::DEFAULT,
    Scales { quantity: 0, price: 0 },
    Scales { quantity: 8, price: 10 },
    Scales { quantity: 18, price: 0 },
    Scales { quantity: 0, price: 18 },
];

/// A request body through the parser and then, child by child, through the checks
/// `execute` makes before it calls the exchange (missing attributes, then each value's
/// grammar, in the spec's order), under several scales. A child that passes becomes
/// the command `execute` would send, which must carry what the engine takes (positive
/// quantities and prices, the buy or sell the amount's sign says) and survive the gRPC
/// wire form unchanged; the exchange's answers are stood in for (names found, commands
/// accepted, an order reported back with a fill). The reply to the whole (errors
/// echoing the values, results echoing the request) must be well-formed. Returns how
/// many children passed their checks.
pub fn execute_checks(data: &[u8]) -> usize {
    use crate::exchange::{SymbolIds, SymbolProblem};
    use crate::execute::{account_values, credit_values, order_values};
    use bourse_engine::command::{CommandBody, OrderRequest, Tif};
    use bourse_engine::{AccountId, Amount, AssetId, Px, Qty, Side, SymbolId};
    let Ok(request) = parse(data, 1_000) else { return 0 };
    let mut passed = 0;
    let (account, ids) = (AccountId(7), SymbolIds { symbol: SymbolId(1), base: AssetId(2) });
    let error = |attrs: Vec<(&'static str, String)>, text: String| Item::Error { attrs, text };
    let echo = |pairs: &[(&'static str, &Option<String>)]| -> Vec<(&'static str, String)> {
        pairs.iter().filter_map(|(name, value)| value.as_ref().map(|v| (*name, v.clone()))).collect()
    };
    for scales in &SCALES {
        let mut items = Vec::new();
        match &request {
            Request::Create(children) => {
                for child in children {
                    match child {
                        CreateChild::Account { id, balance } => match account_values(id, balance, scales) {
                            Ok((external_id, deposit)) => {
                                assert!(deposit >= 0 && value::account_id(&external_id.to_string()).is_some());
                                wire(CommandBody::CreateAccountWithId {
                                    external_id,
                                    asset: AssetId(1),
                                    deposit: Amount(deposit),
                                });
                                passed += 1;
                                items.push(Item::Created { id: id.clone().unwrap_or_default() });
                            }
                            Err(text) => items.push(error(echo(&[("id", id)]), text)),
                        },
                        CreateChild::Symbol { sym, accounts } => {
                            // The lookup's answers in turn: found, unreachable, incompatible.
                            let symbol = sym.as_deref().and_then(value::symbol).map(|name| match name.len() % 3 {
                                0 => Ok(Some(ids)),
                                1 => Err(SymbolProblem::Upstream("stood in".into())),
                                _ => Err(SymbolProblem::Incompatible),
                            });
                            for child in accounts {
                                let SymbolChild::Account { id, shares } = child else { continue };
                                let attrs = echo(&[("sym", sym), ("id", id)]);
                                match credit_values(sym, &symbol, id, shares, scales) {
                                    Ok((found, _, amount)) => {
                                        assert!(amount > 0, "shares credited are positive");
                                        if let Some(found) = found {
                                            wire(CommandBody::Credit {
                                                account,
                                                asset: found.base,
                                                amount: Amount(amount),
                                            });
                                        }
                                        passed += 1;
                                        let (sym, id) =
                                            (sym.clone().unwrap_or_default(), id.clone().unwrap_or_default());
                                        items.push(Item::Credited { sym, id });
                                    }
                                    Err(text) => items.push(error(attrs, text)),
                                }
                            }
                        }
                        CreateChild::Unknown(name) => items.push(error(Vec::new(), format!("Unknown element: {name}"))),
                    }
                }
            }
            Request::Transactions { id: acting, children } => {
                let _ = value::account_id(acting);
                for child in children {
                    match child {
                        TxChild::Order { sym, amount, limit } => match order_values(sym, amount, limit, scales) {
                            Ok((name, qty, px)) => {
                                assert!(value::symbol(name) == Some(name) && qty != 0 && px > 0);
                                let side = if qty > 0 { Side::Buy } else { Side::Sell };
                                let request =
                                    OrderRequest::limit(account, ids.symbol, side, Px(px), Qty(qty.abs()), Tif::Gtc);
                                assert!(request.qty.0 > 0, "the engine gets a positive quantity");
                                wire(CommandBody::Place(request));
                                passed += 1;
                                let (sym, amount, limit) = (sym.clone(), amount.clone(), limit.clone());
                                let (sym, amount, limit) =
                                    (sym.unwrap_or_default(), amount.unwrap_or_default(), limit.unwrap_or_default());
                                items.push(Item::Opened { sym, amount, limit, id: 1 });
                                items.push(Item::Status { id: "1".into(), report: reported(scales, qty.abs(), px) });
                            }
                            Err(text) => {
                                items.push(error(echo(&[("sym", sym), ("amount", amount), ("limit", limit)]), text))
                            }
                        },
                        TxChild::Query { id } | TxChild::Cancel { id } => {
                            match id.as_deref().and_then(value::transaction_id) {
                                Some(order) => items.push(Item::Canceled {
                                    id: id.clone().unwrap_or_default(),
                                    report: reported(scales, order as i64, 1),
                                }),
                                None => items.push(error(echo(&[("id", id)]), "Unknown transaction".into())),
                            }
                        }
                        TxChild::Unknown(name) => items.push(error(Vec::new(), format!("Unknown element: {name}"))),
                    }
                }
            }
        }
        let document = reply::document(&items);
        assert_eq!(
            parse(&document, 100_000),
            Err(RequestError::UnknownRoot("results".into())),
            "a reply did not parse"
        );
    }
    passed
}

/// What `<status>` says of an order of `qty` at `px` half filled, as `execute` reports
/// it from the exchange's answer.
fn reported(scales: &Scales, qty: i64, px: i64) -> OrderReport {
    use bourse_protocol::proto;
    let fill = proto::Fill { qty: qty / 2, px, ts: u64::MAX, ..Default::default() };
    let info = proto::OrderInfo {
        qty,
        qty_filled: qty / 2,
        qty_open: qty - qty / 2,
        status: proto::OrderStatus::Open as i32,
        fills: vec![fill],
        ..Default::default()
    };
    let report = crate::execute::report(scales, &info, true);
    let cancelled = proto::OrderInfo { status: proto::OrderStatus::Cancelled as i32, ..info };
    let _ = crate::execute::report(scales, &cancelled, false);
    report
}

/// `command` survives the gRPC wire form unchanged.
fn wire(command: bourse_engine::command::CommandBody) {
    use bourse_engine::command::CommandBody;
    let body = bourse_protocol::proto::client_command::Body::from(&command);
    assert_eq!(CommandBody::try_from(&body).as_ref(), Ok(&command), "a command survives the wire form");
}

//! The fuzz entry point (`crates/xml/fuzz`, `make fuzz`), also run over its corpus on
//! stable by `tests/fuzz_corpus.rs`: any bytes as a request body are parsed, every value
//! the request carries goes through the value grammars, and the reply built from it
//! (echoing every value) must itself be a well-formed document. Never a panic.

use crate::parse::{parse, CreateChild, Request, RequestError, SymbolChild, TxChild};
use crate::reply::{self, Item};
use crate::value;

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

//! Verbs for people: create assets, symbols and accounts, move money, place and manage
//! orders, look at books and balances, follow trades — against a running node.
//!
//! Every invocation is a new client (a random client id), so a command sent twice by
//! hand is two commands; within one invocation the client library retries with the same
//! sequence number until answered. Output is human-readable; `--json` prints one JSON
//! object per line for scripts. Assets and symbols may be named or numbered.

use bourse_client::{random_client_id, AdminSession, ClientOptions, QueryClient, Reply};
use bourse_engine::command::{
    CommandBody, MarginSpec, MarginSymbol, MarkSource, MatchPolicy, OrderKind, OrderRequest, Stp, SymbolSpec, Tif,
};
use bourse_engine::{AccountId, Amount, AssetId, OrderId, Outcome, Px, Qty, Side, SymbolId};
use bourse_protocol::proto;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

/// Where the node is and how to print.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// Node address(es), tried in turn.
    #[arg(long = "node", global = true, default_value = "127.0.0.1:7400", value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// One JSON object per line instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Queries read the leader's state after a quorum round (every acknowledged
    /// command is visible) instead of any node's own state.
    #[arg(long, global = true)]
    pub linearizable: bool,
    /// The API key a gateway asks for (nodes ignore it).
    #[arg(long, global = true, env = "BOURSE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The cluster's CA directory (`bourse pki init`, or DATA/pki of `cluster up` and
    /// the demo). A node serves with the certificate issued there to `node ID`; every
    /// other command dials nodes over mutual TLS with the one issued to `--as` (not with
    /// --api-key: a gateway's client port takes keys, not certificates).
    #[arg(long, global = true, env = "BOURSE_PKI", value_name = "DIR")]
    pub pki: Option<std::path::PathBuf>,
    /// The identity this command presents to nodes, ROLE:ID (its certificate is
    /// DIR/issued/ROLE-ID.pem). Default: operator:admin for the CLI's verbs and
    /// `cluster`, gateway:ID for `gateway run`, observer:history for `history run`.
    #[arg(long = "as", global = true, env = "BOURSE_AS", value_name = "ROLE:ID")]
    pub identity: Option<String>,
    /// With --api-key: dial the gateway over TLS, verifying its certificate against the
    /// CA certificate(s) in this PEM file. Default with --pki: DIR/ca.pem. With neither,
    /// the gateway is dialed in plaintext (a gateway on loopback without a certificate).
    #[arg(long, global = true, env = "BOURSE_CA", value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,
}

impl Target {
    /// Client options carrying the API key, if one was given, and this process's
    /// certificate ([`credentials`]), if it has one.
    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            api_key: self.api_key.clone().map(bourse_client::ApiKey),
            tls: credentials(),
            ..ClientOptions::default()
        }
    }

    /// The identity to present: `--as`, or `default` (`role:id`).
    pub fn identity_or(&self, default: &str) -> Result<bourse_pki::Identity, String> {
        parse_identity(self.identity.as_deref().unwrap_or(default))
    }

    /// For a gateway's client port (with `--api-key`): with `--ca FILE`, or `--pki DIR`
    /// (DIR/ca.pem), this process dials over TLS trusting that CA ([`credentials`]).
    pub fn use_gateway_trust(&self) -> Result<(), String> {
        let ca = match (&self.ca, &self.pki) {
            (Some(ca), _) => ca.clone(),
            (None, Some(dir)) => bourse_pki::EdgeFiles::ca_of(dir),
            (None, None) => return Ok(()),
        };
        let tls = bourse_client::ClientTls::trusting(&ca).map_err(|e| e.to_string())?;
        let _ = CREDENTIALS.set(tls);
        Ok(())
    }

    /// With `--pki`, makes the certificate of `--as` (or `default`) this process's
    /// [`credentials`].
    pub fn use_credentials(&self, default: &str) -> Result<(), String> {
        let Some(dir) = &self.pki else { return Ok(()) };
        set_credentials(dir, &self.identity_or(default)?)
    }
}

/// The certificate `bourse pki` issued to `identity` (`ROLE:ID`) in the CA directory
/// `dir`, to dial nodes with.
pub fn client_tls(dir: &std::path::Path, identity: &str) -> Result<bourse_client::ClientTls, String> {
    let identity = parse_identity(identity)?;
    bourse_client::ClientTls::issued(dir, &identity).map_err(|e| e.to_string())
}

/// The first of `listens` (a flag and the address it was given) that is not a loopback
/// address: where a listener without keys must not be.
pub fn exposed<'a>(
    listens: impl IntoIterator<Item = (&'a str, Option<std::net::SocketAddr>)>,
) -> Option<(&'a str, std::net::SocketAddr)> {
    listens.into_iter().find_map(|(flag, addr)| addr.filter(|addr| !addr.ip().is_loopback()).map(|addr| (flag, addr)))
}

/// `ROLE:ID` as an identity.
pub fn parse_identity(text: &str) -> Result<bourse_pki::Identity, String> {
    let (role, id) = text.split_once(':').ok_or_else(|| format!("--as {text:?}: expected ROLE:ID"))?;
    let role: bourse_pki::Role = role.parse().map_err(|e| format!("--as {text:?}: {e}"))?;
    bourse_pki::Identity::new(role, id).map_err(|e| format!("--as {text:?}: {e}"))
}

/// The certificate this process dials nodes with: one process, one identity (set once,
/// by the command from `--pki` and `--as`, or by `cluster up` and the demo from the CA
/// they made).
static CREDENTIALS: std::sync::OnceLock<bourse_client::ClientTls> = std::sync::OnceLock::new();

/// Loads the certificate `bourse pki` issued to `identity` in `dir` as this process's
/// credentials (a second call keeps the first).
pub fn set_credentials(dir: &std::path::Path, identity: &bourse_pki::Identity) -> Result<(), String> {
    if CREDENTIALS.get().is_none() {
        let tls = bourse_client::ClientTls::issued(dir, identity).map_err(|e| e.to_string())?;
        let _ = CREDENTIALS.set(tls);
    }
    Ok(())
}

/// This process's credentials, if it has any.
pub fn credentials() -> Option<bourse_client::ClientTls> {
    CREDENTIALS.get().cloned()
}

#[derive(Subcommand, Debug)]
pub enum Verb {
    /// Create an asset (a currency or a stock).
    AssetCreate {
        name: String,
        /// Minor units per major unit, as a power of ten (display only).
        #[arg(long, default_value_t = 2)]
        decimals: u8,
    },
    /// Create a symbol trading BASE against QUOTE.
    SymbolCreate(SymbolArgs),
    /// Create an account.
    AccountCreate,
    /// Deposit money (quote minor units) into an account.
    Deposit { account: u32, asset: String, amount: i64 },
    /// Withdraw available money from an account.
    Withdraw { account: u32, asset: String, amount: i64 },
    /// Credit units of an asset (shares) to an account.
    Credit { account: u32, asset: String, amount: i64 },
    /// Place an order.
    Place(PlaceArgs),
    /// Cancel an order.
    Cancel { account: u32, symbol: String, order: u64 },
    /// Move an order to a new price (it loses priority and may trade).
    Move { account: u32, symbol: String, order: u64, px: i64 },
    /// Take quantity off an order, keeping its priority.
    Reduce { account: u32, symbol: String, order: u64, qty: i64 },
    /// Close the trading day: every open Day order (`--tif day`) expires and its hold is
    /// released. Run it at the session's close (cron, a systemd timer); GTC orders stay.
    CloseDay,
    /// Show an order's status and fills.
    Order { order: u64 },
    /// Show a book's depth.
    Book {
        symbol: String,
        #[arg(long, default_value_t = 10)]
        levels: u32,
    },
    /// Show an account's balances.
    Balances { account: u32 },
    /// Show an account's open orders.
    Orders { account: u32 },
    /// Set the mark price of a margin symbol whose mark is the operator's (`--mark
    /// operator`): positions are valued, and accounts liquidated, against it.
    Mark { symbol: String, px: i64 },
    /// Show an account's report: balances, margin positions valued at their marks
    /// (unrealised P&L, margins, liquidation price), margin per settlement asset, and
    /// open orders.
    Report { account: u32 },
    /// Show the exchange's totals per asset (the conservation check: available +
    /// reserved + fees − bad debt − open position cost = supply) and the open interest
    /// of every margin symbol. Exits non-zero when an asset does not balance.
    ExchangeReport,
    /// List assets and symbols.
    Markets,
    /// Print trades (and best bid/offer changes with --bbo) as they happen, until Ctrl-C.
    Trades {
        /// Symbols to follow; none follows all.
        symbols: Vec<String>,
        #[arg(long)]
        bbo: bool,
        /// Stop after this many updates.
        #[arg(long)]
        count: Option<u64>,
    },
}

#[derive(Args, Debug)]
pub struct SymbolArgs {
    name: String,
    #[arg(long)]
    base: String,
    #[arg(long)]
    quote: String,
    #[arg(long, default_value_t = 1)]
    tick: i64,
    #[arg(long, default_value_t = 1)]
    lot: i64,
    #[arg(long, default_value_t = 1)]
    px_min: i64,
    #[arg(long, default_value_t = 1_000_000_000)]
    px_max: i64,
    /// Fee per lot for the resting side, quote minor units (negative: a rebate).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    fee_maker: i64,
    /// Fee per lot for the incoming side, quote minor units.
    #[arg(long, default_value_t = 0)]
    fee_taker: i64,
    #[arg(long, value_enum, default_value_t = PolicyArg::Fifo)]
    policy: PolicyArg,
    /// A margin contract (a future) with this initial margin, in basis points of a
    /// position's notional (10000 = fully funded); BASE is then the contract and QUOTE
    /// the settlement currency. The other --margin-* flags apply only with it.
    #[arg(long)]
    margin_initial_bp: Option<u32>,
    /// Maintenance margin in basis points: below it, an account is liquidated [default: half the initial].
    #[arg(long)]
    margin_maintenance_bp: Option<u32>,
    /// Quote minor units per (price unit × contract).
    #[arg(long, default_value_t = 1)]
    margin_multiplier: i64,
    /// The largest position either way, counting open orders as filled [default: px_max × limit × multiplier ≤ 2^53, the most that fits].
    #[arg(long)]
    margin_position_limit: Option<i64>,
    /// Where the mark price comes from.
    #[arg(long, value_enum, default_value_t = MarkArg::Operator)]
    margin_mark: MarkArg,
    /// The insurance account: it takes what the book cannot take from a liquidated
    /// account and pays losses beyond an account's cash.
    #[arg(long)]
    margin_insurance: Option<u32>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum MarkArg {
    /// `bourse mark SYMBOL PX` (the last trade until one is set).
    Operator,
    /// The last trade's price.
    LastTrade,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyArg {
    Fifo,
    ProRata,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SideArg {
    Buy,
    Sell,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TifArg {
    Gtc,
    Ioc,
    Fok,
    /// Like GTC until `bourse close-day`.
    Day,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StpArg {
    CancelResting,
    CancelIncoming,
    Allow,
}

#[derive(Args, Debug)]
pub struct PlaceArgs {
    account: u32,
    symbol: String,
    #[arg(value_enum)]
    side: SideArg,
    qty: i64,
    /// Limit price; leave out for a market order.
    #[arg(long)]
    px: Option<i64>,
    /// Market buy: the most quote to spend, fees included; FOK sell: the least to receive.
    #[arg(long)]
    budget: Option<i64>,
    /// Stop trigger: the order waits until the last trade reaches it.
    #[arg(long)]
    stop: Option<i64>,
    #[arg(long, value_enum)]
    tif: Option<TifArg>,
    #[arg(long)]
    post_only: bool,
    /// Iceberg: show at most this much.
    #[arg(long)]
    display: Option<i64>,
    #[arg(long, value_enum, default_value_t = StpArg::CancelResting)]
    stp: StpArg,
}

type Fallible<T> = Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub fn run(target: Target, verb: Verb) -> Fallible<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(err)?;
    runtime.block_on(run_async(target, verb))
}

async fn run_async(target: Target, verb: Verb) -> Fallible<()> {
    let mut cli = Cli::connect(target).await?;
    match verb {
        Verb::AssetCreate { name, decimals } => cli.submit("asset", CommandBody::CreateAsset { name, decimals }).await,
        Verb::SymbolCreate(args) => {
            let spec = SymbolSpec {
                name: args.name,
                base: cli.asset(&args.base).await?,
                quote: cli.asset(&args.quote).await?,
                tick: Px(args.tick),
                lot: Qty(args.lot),
                px_min: Px(args.px_min),
                px_max: Px(args.px_max),
                fee_maker: Amount(args.fee_maker),
                fee_taker: Amount(args.fee_taker),
                policy: match args.policy {
                    PolicyArg::Fifo => MatchPolicy::Fifo,
                    PolicyArg::ProRata => MatchPolicy::ProRata,
                },
            };
            let Some(initial_bp) = args.margin_initial_bp else {
                return cli.submit("symbol", CommandBody::CreateSymbol(Box::new(spec))).await;
            };
            let insurance = args.margin_insurance.ok_or("a margin symbol needs --margin-insurance ACCOUNT")?;
            let multiplier = args.margin_multiplier;
            let limit_max = i128::from(bourse_engine::command::MARGIN_NOTIONAL_MAX)
                / (i128::from(spec.px_max.0.max(1)) * i128::from(multiplier.max(1)));
            let limit_default = (limit_max as i64 / spec.lot.0.max(1)) * spec.lot.0.max(1);
            let margin = MarginSpec {
                initial_bp,
                maintenance_bp: args.margin_maintenance_bp.unwrap_or(initial_bp.div_ceil(2)),
                multiplier,
                position_limit: Qty(args.margin_position_limit.unwrap_or(limit_default)),
                mark: match args.margin_mark {
                    MarkArg::Operator => MarkSource::Operator,
                    MarkArg::LastTrade => MarkSource::LastTrade,
                },
                insurance: AccountId(insurance),
            };
            cli.submit("margin symbol", CommandBody::CreateMarginSymbol(Box::new(MarginSymbol { spec, margin }))).await
        }
        Verb::AccountCreate => cli.submit("account", CommandBody::CreateAccount).await,
        Verb::Deposit { account, asset, amount } => {
            let asset = cli.asset(&asset).await?;
            cli.submit("deposit", CommandBody::Deposit { account: AccountId(account), asset, amount: Amount(amount) })
                .await
        }
        Verb::Withdraw { account, asset, amount } => {
            let asset = cli.asset(&asset).await?;
            cli.submit("withdraw", CommandBody::Withdraw { account: AccountId(account), asset, amount: Amount(amount) })
                .await
        }
        Verb::Credit { account, asset, amount } => {
            let asset = cli.asset(&asset).await?;
            cli.submit("credit", CommandBody::Credit { account: AccountId(account), asset, amount: Amount(amount) })
                .await
        }
        Verb::Place(args) => {
            let request = cli.order_request(args).await?;
            cli.submit("order", CommandBody::Place(request)).await
        }
        Verb::Cancel { account, symbol, order } => {
            let symbol = cli.symbol(&symbol).await?;
            cli.submit("cancel", CommandBody::Cancel { account: AccountId(account), symbol, order: OrderId(order) })
                .await
        }
        Verb::Move { account, symbol, order, px } => {
            let symbol = cli.symbol(&symbol).await?;
            let body = CommandBody::Move { account: AccountId(account), symbol, order: OrderId(order), px: Px(px) };
            cli.submit("move", body).await
        }
        Verb::Reduce { account, symbol, order, qty } => {
            let symbol = cli.symbol(&symbol).await?;
            let body =
                CommandBody::Reduce { account: AccountId(account), symbol, order: OrderId(order), qty_by: Qty(qty) };
            cli.submit("reduce", body).await
        }
        Verb::CloseDay => cli.close_day().await,
        Verb::Order { order } => cli.show_order(order).await,
        Verb::Book { symbol, levels } => cli.show_book(&symbol, levels).await,
        Verb::Balances { account } => cli.show_balances(account).await,
        Verb::Orders { account } => cli.show_orders(account).await,
        Verb::Mark { symbol, px } => {
            let symbol = cli.symbol(&symbol).await?;
            cli.submit("mark", CommandBody::SetMark { symbol, px: Px(px) }).await
        }
        Verb::Report { account } => cli.show_report(account).await,
        Verb::ExchangeReport => cli.show_exchange_report().await,
        Verb::Markets => cli.show_markets().await,
        Verb::Trades { symbols, bbo, count } => cli.follow(&symbols, bbo, count).await,
    }
}

struct Cli {
    target: Target,
    query: QueryClient,
    admin: Option<AdminSession>,
}

impl Cli {
    async fn connect(target: Target) -> Fallible<Cli> {
        let query = QueryClient::connect(target.nodes.clone(), target.options())
            .await
            .map_err(err)?
            .linearizable(target.linearizable);
        Ok(Cli { target, query, admin: None })
    }

    fn print(&self, text: String, value: serde_json::Value) {
        if self.target.json {
            println!("{value}");
        } else {
            println!("{text}");
        }
    }

    async fn admin(&mut self) -> Fallible<&mut AdminSession> {
        if self.admin.is_none() {
            let session = AdminSession::connect(self.target.nodes.clone(), random_client_id(), self.target.options())
                .await
                .map_err(err)?;
            self.admin = Some(session);
        }
        Ok(self.admin.as_mut().expect("connected above"))
    }

    async fn submit(&mut self, what: &str, body: CommandBody) -> Fallible<()> {
        let reply: Reply = self.admin().await?.submit(body).await.map_err(err)?;
        match reply.outcome {
            Outcome::Ok { id } => {
                self.print(
                    format!("{what} ok: id {id} (log index {})", reply.log_index),
                    json!({"ok": true, "id": id, "log_index": reply.log_index}),
                );
                Ok(())
            }
            Outcome::Rejected(reject) => self.rejected(what, reject, &reply),
        }
    }

    async fn close_day(&mut self) -> Fallible<()> {
        let reply: Reply = self.admin().await?.close_day().await.map_err(err)?;
        match reply.outcome {
            Outcome::Ok { id } => {
                self.print(
                    format!("trading day closed: {id} Day orders expired (log index {})", reply.log_index),
                    json!({"ok": true, "expired": id, "log_index": reply.log_index}),
                );
                Ok(())
            }
            Outcome::Rejected(reject) => self.rejected("close-day", reject, &reply),
        }
    }

    fn rejected(&self, what: &str, reject: bourse_engine::Reject, reply: &Reply) -> Fallible<()> {
        self.print(
            format!("{what} rejected: {reject} (code {})", reject.code()),
            json!({"ok": false, "reject": reject.name(), "code": reject.code(), "log_index": reply.log_index}),
        );
        Err(format!("{what} rejected: {reject}"))
    }

    async fn asset(&mut self, name: &str) -> Fallible<AssetId> {
        if let Ok(id) = name.parse::<u32>() {
            return Ok(AssetId(id));
        }
        let info = self.query.asset_by_name(name).await.map_err(err)?;
        info.map(|a| AssetId(a.id)).ok_or_else(|| format!("no asset named {name}"))
    }

    async fn symbol(&mut self, name: &str) -> Fallible<SymbolId> {
        if let Ok(id) = name.parse::<u32>() {
            return Ok(SymbolId(id));
        }
        let info = self.query.symbol_by_name(name).await.map_err(err)?;
        info.map(|s| SymbolId(s.id)).ok_or_else(|| format!("no symbol named {name}"))
    }

    async fn order_request(&mut self, args: PlaceArgs) -> Fallible<OrderRequest> {
        let kind = match (args.px, args.stop) {
            (Some(px), None) => OrderKind::Limit { px: Px(px) },
            (None, None) => OrderKind::Market { budget: args.budget.map(Amount) },
            (Some(px), Some(trigger)) => OrderKind::StopLimit { trigger: Px(trigger), px: Px(px) },
            (None, Some(trigger)) => OrderKind::StopMarket { trigger: Px(trigger), budget: args.budget.map(Amount) },
        };
        let market = matches!(kind, OrderKind::Market { .. } | OrderKind::StopMarket { .. });
        let tif = match args.tif {
            Some(TifArg::Gtc) => Tif::Gtc,
            Some(TifArg::Ioc) => Tif::Ioc,
            Some(TifArg::Fok) => Tif::Fok,
            Some(TifArg::Day) => Tif::Day,
            None if market => Tif::Ioc,
            None => Tif::Gtc,
        };
        Ok(OrderRequest {
            account: AccountId(args.account),
            symbol: self.symbol(&args.symbol).await?,
            side: match args.side {
                SideArg::Buy => Side::Buy,
                SideArg::Sell => Side::Sell,
            },
            kind,
            qty: Qty(args.qty),
            tif,
            post_only: args.post_only,
            display_qty: args.display.map(Qty),
            stp: match args.stp {
                StpArg::CancelResting => Stp::CancelResting,
                StpArg::CancelIncoming => Stp::CancelIncoming,
                StpArg::Allow => Stp::Allow,
            },
        })
    }

    async fn show_order(&mut self, order: u64) -> Fallible<()> {
        let reply = self.query.order(OrderId(order)).await.map_err(err)?;
        let info = reply.order.ok_or("the node sent no order")?;
        let fills: Vec<String> = info.fills.iter().map(|f| format!("{}@{}", f.qty, f.px)).collect();
        self.print(
            format!(
                "order {} account {} symbol {} {} qty {} filled {} open {} status {} fills [{}]",
                info.id,
                info.account,
                info.symbol,
                side_name(info.side),
                info.qty,
                info.qty_filled,
                info.qty_open,
                proto::OrderStatus::try_from(info.status).map_or("unknown", |s| s.as_str_name()),
                fills.join(", ")
            ),
            json!({"order": info.id, "account": info.account, "symbol": info.symbol, "qty": info.qty,
                   "qty_filled": info.qty_filled, "qty_open": info.qty_open, "status": info.status,
                   "fills": info.fills.iter().map(|f| json!({"px": f.px, "qty": f.qty, "fee": f.fee})).collect::<Vec<_>>(),
                   "log_index": reply.log_index}),
        );
        Ok(())
    }

    async fn show_book(&mut self, symbol: &str, levels: u32) -> Fallible<()> {
        let id = self.symbol(symbol).await?;
        let depth = self.query.depth(id, levels).await.map_err(err)?;
        if self.target.json {
            let side = |levels: &[proto::Level]| levels.iter().map(|l| json!([l.px, l.qty])).collect::<Vec<_>>();
            println!(
                "{}",
                json!({"symbol": depth.symbol, "bids": side(&depth.bids), "asks": side(&depth.asks),
                       "last_px": depth.last_px, "log_index": depth.log_index})
            );
            return Ok(());
        }
        println!("{symbol} (log index {}, last {:?})", depth.log_index, depth.last_px);
        println!("{:>14} {:>12} | {:<12} {:<14}", "bid qty", "bid", "ask", "ask qty");
        for i in 0..depth.bids.len().max(depth.asks.len()) {
            let bid =
                depth.bids.get(i).map_or((String::new(), String::new()), |l| (l.qty.to_string(), l.px.to_string()));
            let ask =
                depth.asks.get(i).map_or((String::new(), String::new()), |l| (l.px.to_string(), l.qty.to_string()));
            println!("{:>14} {:>12} | {:<12} {:<14}", bid.0, bid.1, ask.0, ask.1);
        }
        Ok(())
    }

    async fn show_balances(&mut self, account: u32) -> Fallible<()> {
        let reply = self.query.balances(AccountId(account)).await.map_err(err)?;
        let names = self.query.assets().await.map_err(err)?.assets;
        let name = |id: u32| names.iter().find(|a| a.id == id).map_or(id.to_string(), |a| a.name.clone());
        if self.target.json {
            let balances: Vec<_> = reply
                .balances
                .iter()
                .map(|b| json!({"asset": b.asset, "name": name(b.asset), "available": b.available, "reserved": b.reserved}))
                .collect();
            println!("{}", json!({"account": account, "balances": balances, "log_index": reply.log_index}));
            return Ok(());
        }
        println!("account {account} (log index {})", reply.log_index);
        for b in &reply.balances {
            println!("  {:<10} available {:>20} reserved {:>20}", name(b.asset), b.available, b.reserved);
        }
        Ok(())
    }

    async fn show_orders(&mut self, account: u32) -> Fallible<()> {
        let reply = self.query.open_orders(AccountId(account)).await.map_err(err)?;
        for o in &reply.orders {
            self.print(
                format!(
                    "order {} symbol {} {} px {:?} qty {} open {} filled {}",
                    o.id,
                    o.symbol,
                    side_name(o.side),
                    o.px_resting,
                    o.qty,
                    o.qty_open,
                    o.qty_filled
                ),
                json!({"order": o.id, "symbol": o.symbol, "side": o.side, "px": o.px_resting, "qty": o.qty,
                       "qty_open": o.qty_open, "qty_filled": o.qty_filled}),
            );
        }
        if reply.orders.is_empty() && !self.target.json {
            println!("account {account} has no open orders");
        }
        Ok(())
    }

    async fn show_report(&mut self, account: u32) -> Fallible<()> {
        let reply = self.query.account_report(AccountId(account)).await.map_err(err)?;
        if self.target.json {
            let positions: Vec<_> = reply
                .positions
                .iter()
                .map(|p| {
                    json!({"symbol": p.symbol, "size": p.size, "cost": p.cost, "realized": p.realized,
                           "buying": p.buying, "selling": p.selling, "mark": p.mark, "unrealized": p.unrealized,
                           "initial_margin": p.initial_margin, "maintenance_margin": p.maintenance_margin,
                           "liquidation_px": p.liquidation_px})
                })
                .collect();
            let margin: Vec<_> = reply
                .margin
                .iter()
                .map(|m| {
                    json!({"asset": m.asset, "cash": m.cash, "unrealized": m.unrealized, "equity": m.equity,
                           "initial_margin": m.initial_margin, "maintenance_margin": m.maintenance_margin,
                           "free_margin": m.free_margin})
                })
                .collect();
            let balances: Vec<_> = reply
                .balances
                .iter()
                .map(|b| json!({"asset": b.asset, "available": b.available, "reserved": b.reserved}))
                .collect();
            println!(
                "{}",
                json!({"account": account, "balances": balances, "positions": positions, "margin": margin,
                       "open_orders": reply.open_orders.len(), "log_index": reply.log_index})
            );
            return Ok(());
        }
        let names = self.query.assets().await.map_err(err)?.assets;
        let name = |id: u32| names.iter().find(|a| a.id == id).map_or(id.to_string(), |a| a.name.clone());
        let symbols = self.query.symbols().await.map_err(err)?.symbols;
        let symbol = |id: u32| {
            symbols.iter().find(|s| s.id == id).and_then(|s| s.spec.as_ref()).map_or(id.to_string(), |s| s.name.clone())
        };
        println!("account {account} (log index {})", reply.log_index);
        for b in &reply.balances {
            println!("  {:<10} available {:>20} reserved {:>20}", name(b.asset), b.available, b.reserved);
        }
        for p in &reply.positions {
            let mark = p.mark.map_or("-".into(), |m| m.to_string());
            let liquidation = p.liquidation_px.map_or("-".into(), |m| m.to_string());
            println!(
                "  position {:<12} size {:>10} cost {:>14} mark {:>10} unrealised {:>12} realised {:>12} \
                 margin {}/{} liquidation {liquidation}",
                symbol(p.symbol),
                p.size,
                p.cost,
                mark,
                p.unrealized,
                p.realized,
                p.initial_margin,
                p.maintenance_margin
            );
        }
        for m in &reply.margin {
            println!(
                "  margin in {:<8} cash {} equity {} initial {} maintenance {} free {}",
                name(m.asset),
                m.cash,
                m.equity,
                m.initial_margin,
                m.maintenance_margin,
                m.free_margin
            );
        }
        println!("  {} open orders", reply.open_orders.len());
        Ok(())
    }

    async fn show_exchange_report(&mut self) -> Fallible<()> {
        let reply = self.query.exchange_report().await.map_err(err)?;
        let unbalanced: Vec<u32> = reply.assets.iter().filter(|a| !a.balanced).map(|a| a.asset).collect();
        if self.target.json {
            let assets: Vec<_> = reply
                .assets
                .iter()
                .map(|a| {
                    json!({"asset": a.asset, "supply": a.supply, "available": a.available, "reserved": a.reserved,
                           "fees": a.fees, "bad_debt": a.bad_debt, "open_cost": a.open_cost, "balanced": a.balanced})
                })
                .collect();
            let symbols: Vec<_> = reply
                .symbols
                .iter()
                .map(|s| {
                    json!({"symbol": s.symbol, "mark": s.mark, "open_interest": s.open_interest,
                           "longs": s.longs, "shorts": s.shorts})
                })
                .collect();
            println!(
                "{}",
                json!({"assets": assets, "symbols": symbols, "log_index": reply.log_index,
                       "days_closed": reply.days_closed})
            );
        } else {
            println!("exchange totals (log index {}, {} trading days closed)", reply.log_index, reply.days_closed);
            for a in &reply.assets {
                println!(
                    "  asset {:<4} supply {:>20} = available {} + reserved {} + fees {} - bad debt {} - open cost {}: {}",
                    a.asset,
                    a.supply,
                    a.available,
                    a.reserved,
                    a.fees,
                    a.bad_debt,
                    a.open_cost,
                    if a.balanced { "balanced" } else { "DOES NOT BALANCE" }
                );
            }
            for s in &reply.symbols {
                println!(
                    "  symbol {:<4} mark {} open interest {} ({} long, {} short)",
                    s.symbol,
                    s.mark.map_or("-".into(), |m| m.to_string()),
                    s.open_interest,
                    s.longs,
                    s.shorts
                );
            }
        }
        if unbalanced.is_empty() {
            Ok(())
        } else {
            Err(format!("assets {unbalanced:?} do not balance"))
        }
    }

    async fn show_markets(&mut self) -> Fallible<()> {
        let assets = self.query.assets().await.map_err(err)?;
        let symbols = self.query.symbols().await.map_err(err)?;
        for a in &assets.assets {
            self.print(
                format!("asset {} {} (decimals {}, supply {})", a.id, a.name, a.decimals, a.supply),
                json!({"asset": a.id, "name": a.name, "decimals": a.decimals, "supply": a.supply}),
            );
        }
        for s in &symbols.symbols {
            let spec = s.spec.clone().unwrap_or_default();
            self.print(
                format!(
                    "symbol {} {} tick {} lot {} px {}..{} fees maker {} taker {}{}",
                    s.id,
                    spec.name,
                    spec.tick,
                    spec.lot,
                    spec.px_min,
                    spec.px_max,
                    spec.fee_maker,
                    spec.fee_taker,
                    spec.margin.as_ref().map_or(String::new(), |m| format!(
                        " margin: initial {} bp, maintenance {} bp, multiplier {}, limit {}, mark {}, insurance account {}",
                        m.initial_bp,
                        m.maintenance_bp,
                        m.multiplier,
                        m.position_limit,
                        proto::MarkSource::try_from(m.mark).map_or("unknown", |m| m.as_str_name()),
                        m.insurance
                    ))
                ),
                json!({"symbol": s.id, "name": spec.name, "tick": spec.tick, "lot": spec.lot,
                       "margin": spec.margin.as_ref().map(|m| json!({"initial_bp": m.initial_bp,
                           "maintenance_bp": m.maintenance_bp, "multiplier": m.multiplier,
                           "position_limit": m.position_limit, "mark": m.mark, "insurance": m.insurance}))}),
            );
        }
        Ok(())
    }

    async fn follow(&mut self, symbols: &[String], bbo: bool, count: Option<u64>) -> Fallible<()> {
        let mut ids = Vec::new();
        for symbol in symbols {
            ids.push(self.symbol(symbol).await?);
        }
        let mut stream = self.query.subscribe(&ids).await.map_err(err)?;
        let mut seen = 0u64;
        while count.is_none_or(|count| seen < count) {
            let Some(update) = stream.next_update().await.map_err(err)? else { break };
            let held = held_note(&update);
            match update.update {
                Some(proto::market_data_update::Update::Trade(t)) => self.print(
                    format!(
                        "#{} trade symbol {} {} @ {} (taker {}){held}",
                        update.seq,
                        t.symbol,
                        t.qty,
                        t.px,
                        side_name(t.taker_side)
                    ),
                    json!({"seq": update.seq, "ts": update.ts, "release_ts": update.release_ts,
                           "trade": {"symbol": t.symbol, "px": t.px, "qty": t.qty}}),
                ),
                Some(proto::market_data_update::Update::Bbo(b)) if bbo => self.print(
                    format!(
                        "#{} bbo symbol {} bid {:?} x {} ask {:?} x {}",
                        update.seq, b.symbol, b.bid_px, b.bid_qty, b.ask_px, b.ask_qty
                    ),
                    json!({"seq": update.seq, "ts": update.ts, "bbo": {"symbol": b.symbol, "bid_px": b.bid_px,
                           "bid_qty": b.bid_qty, "ask_px": b.ask_px, "ask_qty": b.ask_qty}}),
                ),
                _ => continue,
            }
            seen += 1;
        }
        Ok(())
    }
}

/// Through a gateway: how long the update was held, and when it arrived, after t_m.
fn held_note(update: &proto::MarketDataUpdate) -> String {
    if update.release_ts == 0 {
        return String::new();
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    format!(
        " [released at t_m + {} µs, here at t_m + {} µs]",
        update.release_ts.saturating_sub(update.ts) / 1_000,
        now.saturating_sub(update.ts) / 1_000
    )
}

fn side_name(side: i32) -> &'static str {
    match proto::Side::try_from(side) {
        Ok(proto::Side::Buy) => "buy",
        Ok(proto::Side::Sell) => "sell",
        _ => "?",
    }
}

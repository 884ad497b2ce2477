//! [`QueryClient`]: the read-only `Query` service and the `MarketData` feed.
//!
//! Queries do not go through the log; each reply says the log index it was read at.
//! By default any node answers from its own state (a follower may be a little behind);
//! [`QueryClient::linearizable`] asks for reads that the leader answers only after a
//! quorum confirmed its leadership and it applied everything committed before, so they
//! see every acknowledged command.
//! A failed call moves on to the next endpoint (queries are safe to repeat); an unknown
//! order, account or symbol is [`Error::NotFound`]. The market data stream is not
//! resumed after a break: its `seq` shows the gap, and the caller subscribes again and
//! reads depth to start over.

use std::pin::Pin;
use std::task::{Context, Poll};

use bourse_engine::{AccountId, OrderId, SymbolId};
use bourse_protocol::proto;
use bourse_protocol::proto::market_data_client::MarketDataClient;
use bourse_protocol::proto::query_client::QueryClient as QueryService;
use tonic::transport::Channel;

use crate::endpoints::{AttemptError, Endpoints};
use crate::error::{Error, Result};
use crate::local::{LocalGateway, MessageStream};
use crate::options::ClientOptions;

/// Queries and market data from the first of a list of nodes that answers. Cheap to
/// clone: clones share the connection, so concurrent queries each take a clone rather
/// than wait for one another; each clone fails over on its own.
#[derive(Clone)]
pub struct QueryClient {
    source: Source,
    linearizable: bool,
}

/// Where queries go: nodes or gateways over the network, or a gateway in this process.
#[derive(Clone)]
enum Source {
    Remote(Endpoints),
    Local { gateway: LocalGateway, options: ClientOptions },
}

impl QueryClient {
    /// `message` as a request with the key and, when asked, the linearizable mark.
    fn request<T>(options: &ClientOptions, linearizable: bool, message: T) -> tonic::Request<T> {
        let mut request = options.request(message);
        if linearizable {
            request.metadata_mut().insert("bourse-read", tonic::metadata::MetadataValue::from_static("linearizable"));
        }
        request
    }
}

macro_rules! query {
    ($self:ident, $method:ident, $request:expr) => {{
        let request = $request;
        let linearizable = $self.linearizable;
        match &mut $self.source {
            Source::Remote(endpoints) => {
                let options = endpoints.options().clone();
                endpoints
                    .with_failover(|channel: Channel| {
                        let request = QueryClient::request(&options, linearizable, request.clone());
                        async move {
                            let response = QueryService::new(channel).$method(request).await;
                            response.map(tonic::Response::into_inner).map_err(AttemptError::from_status)
                        }
                    })
                    .await
            }
            Source::Local { gateway, options } => {
                let request = QueryClient::request(options, linearizable, request);
                let service = gateway.0.query();
                service.$method(request).await.map(tonic::Response::into_inner).map_err(Error::from)
            }
        }
    }};
}

impl QueryClient {
    pub async fn connect(endpoints: Vec<String>, options: ClientOptions) -> Result<Self> {
        let mut endpoints = Endpoints::new(endpoints, &options)?;
        endpoints.with_failover(|_channel| async { Ok(()) }).await?;
        Ok(QueryClient { source: Source::Remote(endpoints), linearizable: false })
    }

    /// Queries and market data of a gateway in this process: the same services, keys
    /// and checks as over its listener, without encoding or a socket.
    pub fn connect_local(gateway: LocalGateway, options: ClientOptions) -> Result<Self> {
        options.validate()?;
        Ok(QueryClient { source: Source::Local { gateway, options }, linearizable: false })
    }

    /// Makes every later query linearizable (answered by the leader after a read-index
    /// round), or not.
    pub fn linearizable(mut self, on: bool) -> Self {
        self.linearizable = on;
        self
    }

    /// An open order or a recently closed one.
    pub async fn order(&mut self, order: OrderId) -> Result<proto::GetOrderReply> {
        query!(self, get_order, proto::GetOrderRequest { order: order.0 })
    }

    /// Every balance of one account, by asset id.
    pub async fn balances(&mut self, account: AccountId) -> Result<proto::GetBalancesReply> {
        query!(self, get_balances, proto::GetBalancesRequest { account: account.0 })
    }

    /// The resting and pending stop orders of one account, by order id.
    pub async fn open_orders(&mut self, account: AccountId) -> Result<proto::GetOpenOrdersReply> {
        query!(self, get_open_orders, proto::GetOpenOrdersRequest { account: account.0 })
    }

    /// Aggregated price levels of one book, best first; `levels_max` 0 asks for the
    /// node's default.
    pub async fn depth(&mut self, symbol: SymbolId, levels_max: u32) -> Result<proto::GetDepthReply> {
        query!(self, get_depth, proto::GetDepthRequest { symbol: symbol.0, levels_max })
    }

    /// A gateway's L2 book of `symbol` with the sequence number of its last update
    /// (gap recovery for a `Channel::L2` subscriber).
    pub async fn l2(&mut self, symbol: SymbolId, levels_max: u32) -> Result<proto::L2Snapshot> {
        let request = proto::GetDepthRequest { symbol: symbol.0, levels_max };
        match &mut self.source {
            Source::Remote(endpoints) => {
                let options = endpoints.options().clone();
                endpoints
                    .with_failover(|channel| {
                        let request = options.request(request);
                        async move {
                            let response = MarketDataClient::new(channel).get_l2(request).await;
                            response.map(tonic::Response::into_inner).map_err(AttemptError::from_status)
                        }
                    })
                    .await
            }
            Source::Local { gateway, options } => {
                let service = gateway.0.market_data();
                service.get_l2(options.request(request)).await.map(tonic::Response::into_inner).map_err(Error::from)
            }
        }
    }

    /// Every symbol with its specification.
    pub async fn symbols(&mut self) -> Result<proto::GetSymbolsReply> {
        query!(self, get_symbols, proto::GetSymbolsRequest {})
    }

    /// Every asset.
    pub async fn assets(&mut self) -> Result<proto::GetAssetsReply> {
        query!(self, get_assets, proto::GetAssetsRequest {})
    }

    /// The account created with `external_id` (`CreateAccountWithId`); unknown is
    /// [`Error::NotFound`].
    pub async fn account_by_external_id(&mut self, external_id: u64) -> Result<proto::GetAccountReply> {
        query!(self, get_account, proto::GetAccountRequest { external_id })
    }

    /// The day-trading ledger's symbols with armed triggers and their cached quotes.
    pub async fn day_trading_armed(&mut self) -> Result<proto::GetDayTradingArmedReply> {
        query!(self, get_day_trading_armed, proto::GetDayTradingArmedRequest {})
    }

    /// The day-trading ledger's settings in effect (quote and pending validity, …).
    pub async fn day_trading_config(&mut self) -> Result<proto::GetDayTradingConfigReply> {
        query!(self, get_day_trading_config, proto::GetDayTradingConfigRequest {})
    }

    /// One account's report: balances, margin positions valued at their marks, margin
    /// figures per settlement asset, open orders.
    pub async fn account_report(&mut self, account: AccountId) -> Result<proto::GetAccountReportReply> {
        query!(self, get_account_report, proto::GetAccountReportRequest { account: account.0 })
    }

    /// The exchange's totals per asset (the conservation check) and open interest per
    /// margin symbol.
    pub async fn exchange_report(&mut self) -> Result<proto::GetExchangeReportReply> {
        query!(self, get_exchange_report, proto::GetExchangeReportRequest {})
    }

    /// The asset with this name, if any.
    pub async fn asset_by_name(&mut self, name: &str) -> Result<Option<proto::AssetInfo>> {
        Ok(self.assets().await?.assets.into_iter().find(|asset| asset.name == name))
    }

    /// The symbol with this name, if any.
    pub async fn symbol_by_name(&mut self, name: &str) -> Result<Option<proto::SymbolInfo>> {
        let symbols = self.symbols().await?.symbols;
        Ok(symbols.into_iter().find(|symbol| symbol.spec.as_ref().is_some_and(|spec| spec.name == name)))
    }

    /// Trades and best bid and offer changes of `symbols` (all symbols when empty).
    pub async fn subscribe(&mut self, symbols: &[SymbolId]) -> Result<MarketDataStream> {
        self.subscribe_channels(symbols, &[]).await
    }

    /// The chosen `channels` of `symbols` (all symbols when empty; trades and BBO when
    /// no channel is named). Nodes serve trades and BBO only; gateways serve every channel.
    pub async fn subscribe_channels(
        &mut self,
        symbols: &[SymbolId],
        channels: &[proto::Channel],
    ) -> Result<MarketDataStream> {
        let request = proto::SubscribeRequest {
            symbols: symbols.iter().map(|symbol| symbol.0).collect(),
            channels: channels.iter().map(|&channel| channel as i32).collect(),
        };
        let inner: MessageStream<proto::MarketDataUpdate> = match &mut self.source {
            Source::Remote(endpoints) => {
                let options = endpoints.options().clone();
                let streaming = endpoints
                    .with_failover(|channel| {
                        let request = options.request(request.clone());
                        async move {
                            let response = MarketDataClient::new(channel).subscribe(request).await;
                            response.map(tonic::Response::into_inner).map_err(AttemptError::from_status)
                        }
                    })
                    .await?;
                Box::pin(streaming)
            }
            Source::Local { gateway, options } => {
                let service = gateway.0.market_data();
                service.subscribe(options.request(request)).await.map_err(Error::from)?.into_inner()
            }
        };
        Ok(MarketDataStream { inner })
    }
}

/// Market data updates as they happen; `seq` counts them from 1 without gaps.
pub struct MarketDataStream {
    inner: MessageStream<proto::MarketDataUpdate>,
}

impl MarketDataStream {
    /// The next update, or `None` when the node ended the stream.
    pub async fn next_update(&mut self) -> Result<Option<proto::MarketDataUpdate>> {
        use tokio_stream::StreamExt;
        self.inner.next().await.transpose().map_err(Error::from)
    }
}

impl tokio_stream::Stream for MarketDataStream {
    type Item = Result<proto::MarketDataUpdate>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx).map(|item| item.map(|result| result.map_err(Error::from)))
    }
}

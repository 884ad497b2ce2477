//! Cluster status and the demo's controls: what the dashboard shows beside the market.
//!
//! The HTTP server does not run nodes; whoever does (the demo orchestrator, `bourse
//! demo`) hands it a [`Control`] that answers `GET /v1/cluster`, `POST
//! /v1/cluster/nodes/{id}/kill`, `GET /v1/demo/stats` and `GET /v1/demo/guest`. Without
//! one those routes answer 404: a production gateway exposes no way to kill a node and
//! hands out no key.
//!
//! The statistics are typed ([`DemoStats`]) so that the OpenAPI document describes them
//! and the browser UI's types are generated from it. `?since=SEQ` returns only the
//! points after `SEQ`, so a page that polls every second fetches one point, not the
//! whole history.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::{Param, Params};
use crate::error::ApiError;
use crate::AppState;

/// A boxed future, for the object-safe [`Control`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What runs the cluster.
pub trait Control: Send + Sync + 'static {
    /// Every member as its own Status call answers (or `up: false`).
    fn cluster(&self) -> BoxFuture<'_, ClusterView>;
    /// Kills node `id` with SIGKILL (it is started again a little later).
    fn kill(&self, id: u64) -> BoxFuture<'_, Result<(), String>>;
    /// The demo's statistics (traders, fairness, latency), the points after `since`.
    fn stats(&self, since: u64) -> BoxFuture<'_, DemoStats>;
    /// A key and account for a person to trade with from the browser, if there is one.
    fn guest(&self) -> Option<DemoGuest>;
}

/// A simulated trader of the demo.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct TraderView {
    /// Its place in `values` of every point.
    pub index: u32,
    pub name: String,
    /// market_maker, noise, mean_reversion, momentum, pairs or value.
    pub kind: String,
    /// The gateway its session is on.
    pub gateway: u32,
    pub account: u32,
    /// Its portfolio's value when trading started (cash plus shares at the opening prices), in cents.
    pub value_start: i64,
}

/// A gateway of the demo.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct GatewayView {
    pub id: u32,
    /// Its gRPC address.
    pub address: String,
    /// The injected delay and clock profile.
    pub profile: String,
    /// Traders whose session is on it.
    pub traders: u32,
}

/// The demo's figures over one interval (about a second).
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct StatsPoint {
    /// 1, 2, 3, …: pass the last one seen as `since`.
    pub seq: u64,
    /// End of the interval, ms since the Unix epoch.
    pub ts_ms: u64,
    /// Orders the traders had accepted, and trades, in the interval.
    pub orders: u64,
    pub trades: u64,
    /// Inbound unfairness (CloudEx's ratio): the share of the interval's orders, taken in
    /// the order the engine processed them, stamped earlier than the order before, in %.
    pub inbound_unfairness_pct: f64,
    /// The stricter form: stamped below the highest stamp processed before, in %.
    pub inbound_unfairness_strict_pct: f64,
    /// Outbound unfairness: the share of market data items released by every gateway
    /// that reached at least one of them after its release time, in %.
    pub outbound_unfairness_pct: f64,
    /// Delivery spread of the same item across gateways (latest minus earliest release), µs.
    pub delivery_spread_us_p50: f64,
    pub delivery_spread_us_p99: f64,
    /// Market data release after the leader's timestamp t_m, median, µs.
    pub market_data_delay_us_p50: f64,
    /// The hold d_h the interval's releases had (release time minus t_m), mean, µs: the
    /// adaptive hold's cost, or the fixed one.
    #[serde(default)]
    pub market_data_hold_us_mean: f64,
    /// Market data items the interval's outbound unfairness counts (what
    /// `outbound_unfairness_pct` is a share of).
    #[serde(default)]
    pub market_data_items: u64,
    /// Gateway batches the leader's fair sequencer held when sampled.
    pub sequencer_held: f64,
    /// Its time-average over the interval (Little's law: total hold time / interval).
    pub sequencer_held_mean: f64,
    /// Order acknowledgement latency seen by the traders (sent to committed answer), µs.
    pub latency_us_p50: f64,
    pub latency_us_p90: f64,
    pub latency_us_p99: f64,
    pub latency_us_max: f64,
    /// Each trader's portfolio value (cash plus shares at the last trade price), in
    /// cents, in `traders` order.
    pub values: Vec<i64>,
    /// The starting portfolio at the same prices: what a trader that never traded
    /// holds (the difference is what trading earned).
    pub value_hold: i64,
}

/// Counts since the demo started.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct StatsTotals {
    pub orders: u64,
    pub trades: u64,
    /// Commands the exchange rejected (e.g. a cancel of an order that had just traded).
    pub rejected: u64,
    /// Commands that got no answer (a session failed).
    pub failed: u64,
}

/// The demo's traders and figures.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct DemoStats {
    /// The population (cloudex, mixed).
    pub scenario: String,
    pub started_ms: u64,
    pub traders: Vec<TraderView>,
    pub gateways: Vec<GatewayView>,
    /// Oldest first; only those after `since`.
    pub points: Vec<StatsPoint>,
    pub totals: StatsTotals,
}

/// A key for a person to trade with from the browser.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct DemoGuest {
    pub api_key: String,
    /// The accounts the key trades for.
    pub accounts: Vec<u32>,
}

/// `?since=` on the demo's statistics.
#[derive(Clone, Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsParams {
    /// Only points with a larger seq (default 0: every point kept).
    pub since: Option<u64>,
}

/// One member of the cluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct NodeView {
    pub id: u64,
    /// Its gRPC address.
    pub api: String,
    /// Answering its Status call.
    pub up: bool,
    /// leader, follower, candidate, learner, or down (not answering).
    pub role: String,
    pub term: u64,
    pub leader_id: u64,
    pub applied_index: u64,
    pub committed_index: u64,
    /// Hex state hash at the applied index.
    pub state_hash: String,
    pub pid: u32,
}

/// The cluster as its members see it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct ClusterView {
    pub nodes: Vec<NodeView>,
}

/// A node was killed.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Killed {
    pub killed: u64,
}

fn control(state: &AppState) -> Result<&Arc<dyn Control>, ApiError> {
    state
        .control
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("this server has no cluster control (bourse demo has)".into()))
}

/// The cluster's members, their roles, terms and applied indexes (demo servers only).
#[utoipa::path(get, path = "/v1/cluster", tag = "cluster", security(()),
    responses((status = 200, body = ClusterView), (status = 404, body = crate::model::ErrorBody)))]
pub async fn cluster(State(state): State<Arc<AppState>>) -> Result<Json<ClusterView>, ApiError> {
    Ok(Json(control(&state)?.cluster().await))
}

/// A request a browser did not send from another site's page: no `Origin`, or this
/// server's own (`http(s)://` + `Host`), and no `Sec-Fetch-Site` other than
/// same-origin. A page elsewhere cannot make a visitor's browser press the demo's
/// buttons; scripts and tools, which send no `Origin`, can.
pub struct SameOrigin;

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for SameOrigin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, ApiError> {
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let host = header("host").unwrap_or("");
        let cross_origin = header("origin").is_some_and(|origin| {
            origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) != Some(host)
        });
        let cross_site = header("sec-fetch-site").is_some_and(|site| site != "same-origin" && site != "none");
        if cross_origin || cross_site {
            return Err(ApiError::Forbidden("the demo's controls answer pages of this server only".into()));
        }
        Ok(SameOrigin)
    }
}

/// Kills a node with SIGKILL to watch the failover (demo servers only).
#[utoipa::path(post, path = "/v1/cluster/nodes/{id}/kill", tag = "cluster", security(()),
    params(("id" = u64, Path, description = "Node id")),
    responses((status = 200, body = Killed), (status = 400, body = crate::model::ErrorBody),
        (status = 403, body = crate::model::ErrorBody), (status = 404, body = crate::model::ErrorBody),
        (status = 422, body = crate::model::ErrorBody)))]
pub async fn kill(
    State(state): State<Arc<AppState>>,
    _: SameOrigin,
    Param(id): Param<u64>,
) -> Result<Json<Killed>, ApiError> {
    let control = control(&state)?;
    control.kill(id).await.map_err(|message| ApiError::Invalid { code: 2009, name: "kill_refused", message })?;
    Ok(Json(Killed { killed: id }))
}

/// The demo's traders, fairness and latency figures (demo servers only).
#[utoipa::path(get, path = "/v1/demo/stats", tag = "cluster", params(StatsParams), security(()),
    responses((status = 200, body = DemoStats), (status = 400, body = crate::model::ErrorBody),
        (status = 404, body = crate::model::ErrorBody)))]
pub async fn stats(
    State(state): State<Arc<AppState>>,
    Params(params): Params<StatsParams>,
) -> Result<Json<DemoStats>, ApiError> {
    Ok(Json(control(&state)?.stats(params.since.unwrap_or(0)).await))
}

/// A key and account to trade with from the browser (demo servers only).
#[utoipa::path(get, path = "/v1/demo/guest", tag = "cluster", security(()),
    responses((status = 200, body = DemoGuest), (status = 404, body = crate::model::ErrorBody)))]
pub async fn guest(State(state): State<Arc<AppState>>) -> Result<Json<DemoGuest>, ApiError> {
    control(&state)?.guest().map(Json).ok_or_else(|| ApiError::NotFound("this demo has no guest account".into()))
}

#[cfg(test)]
mod tests {
    use axum::extract::FromRequestParts;

    use super::SameOrigin;

    async fn allowed(headers: &[(&str, &str)]) -> bool {
        let mut request = axum::http::Request::post("/v1/cluster/nodes/1/kill");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let (mut parts, ()) = request.body(()).unwrap().into_parts();
        SameOrigin::from_request_parts(&mut parts, &()).await.is_ok()
    }

    #[tokio::test]
    async fn only_pages_of_this_server_and_tools_may_press_the_demo_buttons() {
        let host = ("host", "127.0.0.1:8080");
        assert!(allowed(&[host]).await, "a tool sends no Origin");
        assert!(allowed(&[host, ("origin", "http://127.0.0.1:8080"), ("sec-fetch-site", "same-origin")]).await);
        assert!(!allowed(&[host, ("origin", "http://evil.example")]).await, "another site's page");
        assert!(!allowed(&[host, ("origin", "http://127.0.0.1:8081")]).await, "another port is another origin");
        assert!(!allowed(&[host, ("sec-fetch-site", "cross-site")]).await, "a no-cors form post");
        assert!(!allowed(&[host, ("origin", "null")]).await, "a sandboxed page");
    }
}

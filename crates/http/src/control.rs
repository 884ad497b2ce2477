//! Cluster status and the demo's controls: what the dashboard shows beside the market.
//!
//! The HTTP server does not run nodes; whoever does (the demo orchestrator, `bourse
//! demo`) hands it a [`Control`] that answers `GET /v1/cluster`, `POST
//! /v1/cluster/nodes/{id}/kill` and `GET /v1/demo/stats`. Without one those routes
//! answer 404: a production gateway exposes no way to kill a node.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::Param;
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
    /// The demo's statistics (traders, fairness, latency), as JSON.
    fn stats(&self) -> BoxFuture<'_, serde_json::Value>;
}

/// One member of the cluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct NodeView {
    pub id: u64,
    /// Its gRPC address.
    pub api: String,
    /// Answering its Status call.
    pub up: bool,
    /// leader, follower, candidate, learner, or unknown when down.
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
#[utoipa::path(get, path = "/v1/cluster", tag = "cluster",
    responses((status = 200, body = ClusterView), (status = 404, body = crate::model::ErrorBody)))]
pub async fn cluster(State(state): State<Arc<AppState>>) -> Result<Json<ClusterView>, ApiError> {
    Ok(Json(control(&state)?.cluster().await))
}

/// Kills a node with SIGKILL to watch the failover (demo servers only).
#[utoipa::path(post, path = "/v1/cluster/nodes/{id}/kill", tag = "cluster",
    params(("id" = u64, Path, description = "Node id")),
    responses((status = 200, body = Killed), (status = 400, body = crate::model::ErrorBody),
        (status = 404, body = crate::model::ErrorBody), (status = 422, body = crate::model::ErrorBody)))]
pub async fn kill(State(state): State<Arc<AppState>>, Param(id): Param<u64>) -> Result<Json<Killed>, ApiError> {
    let control = control(&state)?;
    control.kill(id).await.map_err(|message| ApiError::Invalid { code: 2009, name: "kill_refused", message })?;
    Ok(Json(Killed { killed: id }))
}

/// The demo's traders, fairness and latency figures (demo servers only).
#[utoipa::path(get, path = "/v1/demo/stats", tag = "cluster",
    responses((status = 200, description = "Statistics of the demo", body = Object), (status = 404, body = crate::model::ErrorBody)))]
pub async fn stats(State(state): State<Arc<AppState>>) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(control(&state)?.stats().await))
}

//! What the demo gives the HTTP server: cluster status from each node's Status call, the
//! kill button (SIGKILL, then a restart on the node's data a few seconds later), the
//! statistics, and the guest key for the trading page.

use std::sync::Arc;

use bourse_http::control::{BoxFuture, ClusterView, Control, DemoGuest, DemoStats};

use super::nodes::Nodes;
use super::stats::Stats;

pub struct DemoControl {
    pub nodes: Arc<Nodes>,
    pub stats: Arc<Stats>,
    pub guest: DemoGuest,
}

impl Control for DemoControl {
    fn cluster(&self) -> BoxFuture<'_, ClusterView> {
        Box::pin(self.nodes.status())
    }

    fn kill(&self, id: u64) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.nodes.kill(id)?;
            say!("demo: node {id} killed with SIGKILL from the dashboard; it starts again on its data shortly");
            Ok(())
        })
    }

    fn stats(&self, since: u64) -> BoxFuture<'_, DemoStats> {
        Box::pin(async move { self.stats.snapshot(since) })
    }

    fn guest(&self) -> Option<DemoGuest> {
        Some(self.guest.clone())
    }
}

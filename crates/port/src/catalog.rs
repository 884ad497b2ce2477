//! The catalog: asset and symbol names to ids, learned from the exchange.

use std::sync::RwLock;

use bourse_client::{Error, QueryClient};
use bourse_protocol::proto;

/// Assets and symbols as last read upstream. Neither is ever renamed or removed in the
/// engine, so a name found here is right for ever; only a miss is asked upstream.
#[derive(Default)]
pub struct Catalog {
    lists: RwLock<Lists>,
}

#[derive(Default)]
struct Lists {
    assets: Vec<proto::AssetInfo>,
    symbols: Vec<proto::SymbolInfo>,
}

impl Catalog {
    /// The asset named `name` (or given as its id), as far as the catalog knows.
    pub fn find_asset(&self, name: &str) -> Option<proto::AssetInfo> {
        let by_id = name.parse::<u32>().ok();
        let lists = self.lists.read().expect("catalog lock");
        lists.assets.iter().find(|a| Some(a.id) == by_id || a.name == name).cloned()
    }

    /// The symbol named `name` (or given as its id), as far as the catalog knows.
    pub fn find_symbol(&self, name: &str) -> Option<proto::SymbolInfo> {
        let by_id = name.parse::<u32>().ok();
        let lists = self.lists.read().expect("catalog lock");
        lists
            .symbols
            .iter()
            .find(|s| Some(s.id) == by_id || s.spec.as_ref().is_some_and(|spec| spec.name == name))
            .cloned()
    }

    /// The asset named `name` (or given as its id), asking upstream with (a clone of)
    /// `query` on a miss only.
    pub async fn asset(&self, query: &QueryClient, name: &str) -> Result<Option<proto::AssetInfo>, Error> {
        if let Some(found) = self.find_asset(name) {
            return Ok(Some(found));
        }
        self.learn_assets(query.clone().assets().await?.assets);
        Ok(self.find_asset(name))
    }

    /// The symbol named `name` (or given as its id), asking upstream with (a clone of)
    /// `query` on a miss only.
    pub async fn symbol(&self, query: &QueryClient, name: &str) -> Result<Option<proto::SymbolInfo>, Error> {
        if let Some(found) = self.find_symbol(name) {
            return Ok(Some(found));
        }
        self.learn_symbols(query.clone().symbols().await?.symbols);
        Ok(self.find_symbol(name))
    }

    /// The name of asset `id`, as far as the catalog knows ("" when it does not).
    pub fn asset_name(&self, id: u32) -> String {
        let lists = self.lists.read().expect("catalog lock");
        lists.assets.iter().find(|a| a.id == id).map(|a| a.name.clone()).unwrap_or_default()
    }

    /// Remembers the newest asset list read upstream.
    pub fn learn_assets(&self, assets: Vec<proto::AssetInfo>) {
        self.lists.write().expect("catalog lock").assets = assets;
    }

    /// Remembers the newest symbol list read upstream.
    pub fn learn_symbols(&self, symbols: Vec<proto::SymbolInfo>) {
        self.lists.write().expect("catalog lock").symbols = symbols;
    }
}

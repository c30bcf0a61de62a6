//! [`LiveCatalog`]: the catalog being served, which a plugin reload replaces as a whole.
//!
//! Readers take the current [`Catalog`] with [`LiveCatalog::current`] and keep that `Arc` for
//! the request they are serving, so one request sees one consistent catalog even if a reload
//! lands meanwhile. Nothing is ever mutated in place: a reload builds a new catalog and swaps
//! it in. A call in flight holds its tool's `Arc<ToolEntry>`, and through it the plugin that
//! runs it, so the old library stays loaded until the last such call returns.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::Catalog;

/// The catalog as of now. `Send + Sync`; shared as `Arc<LiveCatalog>`.
pub struct LiveCatalog {
    current: ArcSwap<Catalog>,
}

impl LiveCatalog {
    pub fn new(catalog: Catalog) -> Self {
        LiveCatalog {
            current: ArcSwap::from_pointee(catalog),
        }
    }

    /// The catalog being served right now. Cheap (no lock, no copy): take it once per request.
    pub fn current(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// Serves `catalog` from now on; returns the one it replaces.
    pub fn replace(&self, catalog: Catalog) -> Arc<Catalog> {
        self.current.swap(Arc::new(catalog))
    }
}

impl From<Catalog> for LiveCatalog {
    fn from(catalog: Catalog) -> Self {
        LiveCatalog::new(catalog)
    }
}

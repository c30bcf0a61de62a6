//! [`LiveCatalog`]: the catalog being served, which a plugin reload replaces as a whole.
//!
//! Readers take the current [`Catalog`] with [`LiveCatalog::current`] and keep that `Arc` for
//! the request they are serving, so one request sees one consistent catalog even if a reload
//! lands meanwhile. Nothing is ever mutated in place: a reload builds a new catalog and swaps
//! it in. A call in flight holds its tool's `Arc<ToolEntry>`, and through it the plugin that
//! runs it, so the old library stays loaded until the last such call returns.

use std::sync::{
    Arc, Mutex, Weak,
    atomic::{AtomicBool, Ordering},
};

use arc_swap::ArcSwap;

use super::{Catalog, Workflow};

/// Whether a catalog served in this process has had a tool that runs as a task. Read by the
/// transports (`mcp/legacy_tasks.rs`), which hand a 2025 `tools/list` to the handler's own
/// answer, the one that says which tools run as tasks, only when one may: that answer costs a
/// listing about a third more CPU. Never cleared: a process that served such a tool once keeps
/// the slower, complete listing, which is right for every catalog.
static SERVED_TASK_TOOLS: AtomicBool = AtomicBool::new(false);

/// Whether any catalog this process served had a tool that runs as a task.
pub fn served_task_tools() -> bool {
    SERVED_TASK_TOOLS.load(Ordering::Relaxed)
}

fn note_task_tools(catalog: &Catalog) {
    if catalog.tools().any(|tool| tool.manifest.task.is_some()) {
        SERVED_TASK_TOOLS.store(true, Ordering::Relaxed);
    }
}

/// The catalog as of now. `Send + Sync`; shared as `Arc<LiveCatalog>`.
pub struct LiveCatalog {
    current: ArcSwap<Catalog>,
    /// The workflows of replaced catalogs, as long as an instance still runs on one (the rule
    /// in [`Catalog::follow`]). Weak: a version nobody runs any more is released with its
    /// plugin. An instance activated again after passivation finds its version here.
    retired: Mutex<Vec<Weak<Workflow>>>,
}

impl LiveCatalog {
    pub fn new(catalog: Catalog) -> Self {
        note_task_tools(&catalog);
        LiveCatalog {
            current: ArcSwap::from_pointee(catalog),
            retired: Mutex::new(Vec::new()),
        }
    }

    /// Machine `version` of workflow `id` as a loaded plugin brings it: the catalog's, or a
    /// replaced one some instance still runs on. `None`: no loaded plugin brings it.
    pub fn loaded_version(&self, id: &str, version: &str) -> Option<Arc<Workflow>> {
        if let Some(workflow) = self.current().workflow(id)
            && workflow.version == version
        {
            return Some(workflow.clone());
        }
        self.retired()
            .iter()
            .filter_map(Weak::upgrade)
            .find(|workflow| workflow.id == id && workflow.version == version)
    }

    fn retired(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Workflow>>> {
        // Pushes and scans only: a panic cannot leave the list inconsistent.
        self.retired
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The catalog being served right now. Cheap (no lock, no copy): take it once per request.
    pub fn current(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// Serves `catalog` from now on; returns the one it replaces.
    pub fn replace(&self, catalog: Catalog) -> Arc<Catalog> {
        note_task_tools(&catalog);
        let old = self.current.swap(Arc::new(catalog));
        let mut retired = self.retired();
        retired.retain(|workflow| workflow.strong_count() > 0);
        retired.extend(old.workflows().map(Arc::downgrade));
        old
    }
}

impl From<Catalog> for LiveCatalog {
    fn from(catalog: Catalog) -> Self {
        LiveCatalog::new(catalog)
    }
}

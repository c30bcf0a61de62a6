//! The subcommands of the `turnstile` binary, one per file. Each returns the process exit code.

pub mod check;
pub mod graph;
pub mod machine;
pub mod serve;

use std::path::Path;

use crate::{
    catalog::{Catalog, CatalogError},
    plugin::{self, PluginError},
};

/// Every plugin in `dir` that loads and fits, and what went wrong with the others.
pub struct LoadReport {
    pub catalog: Catalog,
    pub load_errors: Vec<PluginError>,
    pub catalog_errors: Vec<CatalogError>,
}

impl LoadReport {
    pub fn load(dir: &Path) -> anyhow::Result<LoadReport> {
        if !dir.is_dir() {
            anyhow::bail!(
                "plugin directory {} does not exist or is not a directory",
                dir.display()
            );
        }
        let (plugins, load_errors) = plugin::load_dir(dir);
        let (catalog, catalog_errors) = Catalog::build(plugins);
        Ok(LoadReport {
            catalog,
            load_errors,
            catalog_errors,
        })
    }

    /// Every problem, one line each.
    pub fn problems(&self) -> Vec<String> {
        self.load_errors
            .iter()
            .map(ToString::to_string)
            .chain(self.catalog_errors.iter().map(ToString::to_string))
            .collect()
    }
}

//! The subcommands of the `turnstile` binary, one per file. Each returns the process exit code.

pub mod check;
pub mod graph;
pub mod instances;
pub mod load;
pub mod machine;
pub mod replacement;
pub mod serve;

use std::path::Path;

use crate::{
    catalog::{Catalog, CatalogError},
    plugin::{self, PluginConfigs, PluginError},
};

/// Every plugin in `dir` that loads and fits, and what went wrong with the others.
pub struct LoadReport {
    pub catalog: Catalog,
    pub load_errors: Vec<PluginError>,
    pub catalog_errors: Vec<CatalogError>,
}

impl LoadReport {
    /// Loads with the default call pool per plugin, configured by the environment only.
    pub fn load(dir: &Path) -> anyhow::Result<LoadReport> {
        LoadReport::load_with(dir, plugin::DEFAULT_POOL_SIZE, &PluginConfigs::default())
    }

    /// Loads, giving each plugin a pool of `pool_size` concurrent calls (`--plugin-pool`) and
    /// what `configs` has for it at `init`.
    pub fn load_with(
        dir: &Path,
        pool_size: usize,
        configs: &PluginConfigs,
    ) -> anyhow::Result<LoadReport> {
        if !dir.is_dir() {
            anyhow::bail!(
                "plugin directory {} does not exist or is not a directory",
                dir.display()
            );
        }
        let (mut plugins, load_errors) = plugin::load_dir(dir, configs);
        for plugin in &mut plugins {
            plugin.set_pool_size(pool_size);
        }
        let (catalog, catalog_errors) = Catalog::build(plugins);
        Ok(LoadReport {
            catalog,
            load_errors,
            catalog_errors,
        })
    }

    /// The files that were refused (did not load, or did not fit the catalog).
    pub fn refused_files(&self) -> Vec<std::path::PathBuf> {
        self.load_errors
            .iter()
            .map(|error| error.path().to_path_buf())
            .chain(self.catalog_errors.iter().map(|error| error.plugin.clone()))
            .collect()
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

//! The subcommands of the `turnstile` binary, one per file. Each returns the process exit code.

pub mod check;
pub mod graph;
pub mod instances;
pub mod load;
pub mod machine;
pub mod new_plugin;
pub mod new_upstream;
pub mod plugin_host;
pub mod replacement;
pub mod serve;

use std::path::Path;

use crate::{
    catalog::{Catalog, CatalogError},
    plugin::{self, LoadOptions, PluginError},
};

/// Every plugin in `dir` that loads and fits, and what went wrong with the others.
pub struct LoadReport {
    pub catalog: Catalog,
    pub load_errors: Vec<PluginError>,
    pub catalog_errors: Vec<CatalogError>,
}

impl LoadReport {
    /// Loads with the default call pool per plugin, every plugin in this process.
    pub fn load(dir: &Path) -> anyhow::Result<LoadReport> {
        LoadReport::load_with(dir, &LoadOptions::default())
    }

    /// Loads as `serve` does: each plugin with a pool of `options.pool_size` concurrent calls
    /// (`--plugin-pool`), the isolated ones in processes of their own (`--isolate`).
    pub fn load_with(dir: &Path, options: &LoadOptions) -> anyhow::Result<LoadReport> {
        if !dir.is_dir() {
            anyhow::bail!(
                "plugin directory {} does not exist or is not a directory",
                dir.display()
            );
        }
        let (plugins, load_errors) = plugin::load_dir_with(dir, options);
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

    /// The test fixtures left out (see `--allow-test-plugins`), one line each.
    pub fn fixtures_skipped(&self) -> Vec<String> {
        self.load_errors
            .iter()
            .filter(|error| matches!(error, PluginError::TestFixture { .. }))
            .map(ToString::to_string)
            .collect()
    }

    /// What loading refused without refusing a plugin (an upstream's binding of a tool it
    /// does not have), one line each, naming the file.
    pub fn notes(&self) -> Vec<String> {
        self.catalog
            .plugins()
            .iter()
            .flat_map(|plugin| {
                plugin
                    .notes()
                    .iter()
                    .map(|note| format!("{}: {note}", plugin.path().display()))
            })
            .collect()
    }

    /// Every problem, one line each (a test fixture left out is not one).
    pub fn problems(&self) -> Vec<String> {
        self.load_errors
            .iter()
            .filter(|error| !matches!(error, PluginError::TestFixture { .. }))
            .map(ToString::to_string)
            .chain(self.catalog_errors.iter().map(ToString::to_string))
            .collect()
    }
}

//! `turnstile check`: load a plugin directory the way `serve` would and report every problem,
//! then every workflow's graph warnings (`statechart::lint`): errors with `--strict`. With
//! `--store`, also what serving the directory would do to the instances in that store
//! (`replacement.rs`).

use std::{path::Path, process::ExitCode};

use super::LoadReport;
use crate::statechart::lint::{self, ToolBinding};

/// `store`: the URL and namespace of a store whose instances to judge against the catalog.
pub fn run(
    plugins: &Path,
    strict: bool,
    store: Option<&(String, String)>,
) -> anyhow::Result<ExitCode> {
    let report = LoadReport::load(plugins)?;
    for plugin in report.catalog.plugins() {
        let manifest = plugin.manifest();
        println!(
            "ok    {} ({} {}): {} tools, {} workflows",
            plugin.path().display(),
            manifest.name,
            manifest.version,
            manifest.tools.len(),
            manifest.workflows.len()
        );
    }
    // A binding refused by an upstream's load is served without; here it is an error to fix.
    let mut problems = report.problems();
    problems.extend(report.notes());
    for problem in &problems {
        println!("error {problem}");
    }
    let label = if strict { "error" } else { "warn " };
    let mut warnings = 0;
    for workflow in report.catalog.workflows() {
        let bindings: Vec<ToolBinding> = workflow
            .tools
            .iter()
            .map(|tool| ToolBinding {
                name: tool.name(),
                states: &tool.manifest.states,
                event: tool.manifest.transition.as_deref(),
                on_error: tool.manifest.on_error.as_deref(),
                on_cancel: tool.manifest.on_cancel.as_deref(),
            })
            .collect();
        for warning in lint::check(&workflow.machine, &bindings) {
            warnings += 1;
            println!("{label} workflow \"{}\": {warning}", workflow.id);
        }
    }
    if let Some((url, namespace)) = store {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let stranded = runtime.block_on(async {
            let options = crate::store::StoreOptions {
                namespace: namespace.clone(),
                ..Default::default()
            };
            let store = crate::store::open(url, &options).await?;
            super::replacement::report(&report.catalog, &*store, &mut std::io::stdout().lock())
                .await
        })?;
        warnings += stranded;
    }
    Ok(if problems.is_empty() && (!strict || warnings == 0) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

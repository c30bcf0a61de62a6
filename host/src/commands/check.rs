//! `turnstile check`: load a plugin directory the way `serve` would and report every problem,
//! then every workflow's graph warnings (`statechart::lint`): errors with `--strict`.

use std::{path::Path, process::ExitCode};

use super::LoadReport;
use crate::statechart::lint::{self, ToolBinding};

pub fn run(plugins: &Path, strict: bool) -> anyhow::Result<ExitCode> {
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
    let problems = report.problems();
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
            })
            .collect();
        for warning in lint::check(&workflow.machine, &bindings) {
            warnings += 1;
            println!("{label} workflow \"{}\": {warning}", workflow.id);
        }
    }
    Ok(if problems.is_empty() && (!strict || warnings == 0) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

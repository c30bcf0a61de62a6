//! `turnstile check`: load a plugin directory the way `serve` would and report every problem.

use std::{path::Path, process::ExitCode};

use super::LoadReport;

pub fn run(plugins: &Path) -> anyhow::Result<ExitCode> {
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
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

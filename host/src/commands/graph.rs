//! `turnstile graph`: each workflow as a diagram, with the tools visible in each state.

use std::{path::Path, process::ExitCode};

use super::LoadReport;
use crate::statechart::diagram::{self, DiagramFormat};

pub fn run(plugins: &Path, format: DiagramFormat) -> anyhow::Result<ExitCode> {
    let report = LoadReport::load(plugins)?;
    for problem in report.problems() {
        tracing::error!("{problem}");
    }
    for workflow in report.catalog.workflows() {
        let tools: Vec<(String, Vec<String>)> = workflow
            .tools
            .iter()
            .map(|tool| (tool.name().to_string(), tool.manifest.states.clone()))
            .collect();
        println!("{}", diagram::render(&workflow.machine, &tools, format));
    }
    Ok(ExitCode::SUCCESS)
}

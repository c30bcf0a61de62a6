//! `turnstile graph`: each workflow as a diagram, with the tools visible, and the prompts and
//! resources offered, in each state.

use std::{path::Path, process::ExitCode};

use super::LoadReport;
use crate::{
    catalog::Bound,
    statechart::diagram::{self, DiagramFormat, Offered},
};

pub fn run(plugins: &Path, format: DiagramFormat) -> anyhow::Result<ExitCode> {
    let report = LoadReport::load(plugins)?;
    for problem in report.problems() {
        tracing::error!("{problem}");
    }
    for workflow in report.catalog.workflows() {
        let catalog = &report.catalog;
        let of_workflow = |entry: &dyn Bound, name: &str| {
            (entry.workflow() == Some(workflow.id.as_str()))
                .then(|| (name.to_owned(), entry.states().to_vec()))
        };
        let offered = Offered {
            tools: workflow
                .tools
                .iter()
                .map(|tool| (tool.name().to_string(), tool.manifest.states.clone()))
                .collect(),
            prompts: catalog
                .prompts()
                .filter_map(|p| of_workflow(&**p, &p.manifest.name))
                .collect(),
            resources: (catalog.resources())
                .filter_map(|r| of_workflow(&**r, &r.manifest.uri))
                .chain(
                    catalog
                        .templates()
                        .filter_map(|t| of_workflow(&**t, &t.manifest.uri_template)),
                )
                .collect(),
        };
        println!(
            "{}",
            diagram::render_offered(&workflow.machine, &offered, format)
        );
    }
    Ok(ExitCode::SUCCESS)
}

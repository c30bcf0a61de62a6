//! `turnstile graph`: each workflow (or the one named) as a diagram, with the tools visible, and
//! the prompts and resources offered, in each state.

use std::{io::Write, path::Path, process::ExitCode, sync::Arc};

use anyhow::bail;

use super::LoadReport;
use crate::{
    catalog::{Workflow, offered},
    statechart::diagram::{self, DiagramFormat},
};

/// Prints the diagrams. `workflow` picks one by id; an SVG is one picture of one workflow, so
/// with several loaded it must be named; `highlight` (SVG only) marks states as active, each a
/// state or a whole state value ([`diagram::highlighted`]): all of them are lit, since an instance
/// in a parallel state is in several at once.
pub fn run(
    plugins: &Path,
    workflow: Option<&str>,
    format: DiagramFormat,
    highlight: &[String],
) -> anyhow::Result<ExitCode> {
    if !highlight.is_empty() && format != DiagramFormat::Svg {
        bail!("--highlight marks a state in an SVG: add --format svg");
    }
    let highlight: Vec<&str> = highlight.iter().map(String::as_str).collect();
    let report = LoadReport::load(plugins)?;
    for problem in report.problems() {
        tracing::error!("{problem}");
    }
    let catalog = &report.catalog;
    let known = || {
        let ids: Vec<&str> = catalog.workflows().map(|w| w.id.as_str()).collect();
        if ids.is_empty() {
            "none".to_owned()
        } else {
            ids.join(", ")
        }
    };
    let chosen: Vec<&Arc<Workflow>> = match workflow {
        Some(id) => match catalog.workflow(id) {
            Some(w) => vec![w],
            None => bail!(
                "no workflow `{id}` in {} (known workflows: {})",
                plugins.display(),
                known()
            ),
        },
        None => catalog.workflows().collect(),
    };
    if format == DiagramFormat::Svg && chosen.len() > 1 {
        bail!(
            "an SVG draws one workflow: name it, as in `turnstile graph <WORKFLOW> --format svg` \
             (known workflows: {})",
            known()
        );
    }
    // Written, not printed: a closed pipe (`| head`) is an error to report, not a panic.
    let mut out = std::io::stdout().lock();
    for workflow in chosen {
        let offered = offered(catalog, workflow);
        if format == DiagramFormat::Svg {
            let svg = diagram::render_svg(&workflow.machine, &offered, &highlight)?;
            out.write_all(svg.as_bytes())?;
        } else {
            let text = diagram::render_offered(&workflow.machine, &offered, format);
            writeln!(out, "{text}")?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

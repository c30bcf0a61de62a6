//! What a workflow offers in each state, as a diagram draws it: its tools, and the prompts and
//! resources bound to it, each with the states it is bound to. `turnstile graph` and the
//! console draw the same diagram from it.

use super::{Bound, Catalog, Workflow};
use crate::statechart::diagram::Offered;

/// The workflow's tools, and the prompts and resources bound to it, with the states each is
/// bound to.
pub fn offered(catalog: &Catalog, workflow: &Workflow) -> Offered {
    let of_workflow = |entry: &dyn Bound, name: &str| {
        (entry.workflow() == Some(workflow.id.as_str()))
            .then(|| (name.to_owned(), entry.states().to_vec()))
    };
    Offered {
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
    }
}

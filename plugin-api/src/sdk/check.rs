//! The checks [`Toolkit::build`](super::Toolkit::build) makes of each tool, prompt and
//! resource, on its own and against its workflow's machine, in the SDK's words (one sentence
//! per problem, naming what it is about, every problem at once), plus the per-state event check
//! the host does not make. The rules are not copies: the tool-name rule is the ABI crate's
//! ([`check_tool_name`]), the machine is read by the host's statechart engine, and the toolkit
//! runs the ABI crate's [`Manifest::check`](crate::Manifest::check) over the manifest it
//! writes. Nothing here builds or dispatches anything.

use super::{
    prompt::{Prompt, non_string_arguments},
    resource::{Declared, Resource},
    schema,
    tool::Tool,
    workflow::Workflow,
};
use crate::{manifest::check_tool_name, uri_template};

/// The problems of one tool on its own and against its workflow's machine.
pub(super) fn check_tool(tool: &Tool) -> Vec<String> {
    let manifest = &tool.manifest;
    let name = &manifest.name;
    let mut problems = Vec::new();
    if check_tool_name(name).is_err() {
        problems.push(format!(
            "tool name {name:?} is not 1 to 128 characters of A-Z a-z 0-9 _ - ."
        ));
    }
    if manifest.description.trim().is_empty() {
        problems.push(format!("tool {name} has no description (call .describe)"));
    }
    if !schema::is_object_schema(&manifest.input_schema) {
        problems.push(format!(
            "tool {name}: its input type must be a struct (a JSON object), not {}",
            manifest.input_schema
        ));
    }
    if let Some(output) = &manifest.output_schema
        && !schema::is_object_schema(output)
    {
        problems.push(format!(
            "tool {name}: its output type must be a struct (a JSON object), not {output}"
        ));
    }
    let Some(workflow) = &tool.workflow else {
        return problems;
    };
    let Ok(machine) = workflow.parsed() else {
        // Reported once, with the workflow.
        return problems;
    };
    let id = workflow.id();
    for state in &manifest.states {
        if !machine.has_state(state) {
            problems.push(format!(
                "tool {name}: workflow \"{id}\" has no state \"{state}\""
            ));
        }
    }
    if let Some(event) = &manifest.transition {
        if !machine.accepts_event(event) {
            problems.push(format!(
                "tool {name}: no state of workflow \"{id}\" takes event \"{event}\""
            ));
        }
        for state in &manifest.states {
            if machine.has_state(state)
                && machine.accepts_event(event)
                && !machine.accepts_event_in(state, event)
            {
                problems.push(format!(
                    "tool {name}: event \"{event}\" does nothing in state \"{state}\" of \
                     workflow \"{id}\""
                ));
            }
        }
    }
    if let Some(event) = &manifest.on_error
        && !machine.accepts_event(event)
    {
        problems.push(format!(
            "tool {name}: on_error event \"{event}\" is taken by no state of workflow \"{id}\""
        ));
    }
    if let Some(event) = &manifest.on_cancel
        && !machine.accepts_event(event)
    {
        problems.push(format!(
            "tool {name}: on_cancel event \"{event}\" is taken by no state of workflow \"{id}\""
        ));
    }
    problems
}

/// The problems of one prompt on its own and against its workflow's machine.
pub(super) fn check_prompt(prompt: &Prompt) -> Vec<String> {
    let manifest = &prompt.manifest;
    let what = format!("prompt {}", manifest.name);
    let mut problems = Vec::new();
    if check_tool_name(&manifest.name).is_err() {
        problems.push(format!(
            "prompt name {:?} is not 1 to 128 characters of A-Z a-z 0-9 _ - .",
            manifest.name
        ));
    }
    if manifest.description.trim().is_empty() {
        problems.push(format!("{what} has no description (call .describe)"));
    }
    let not_strings = non_string_arguments(&prompt.arguments_schema);
    if !not_strings.is_empty() {
        problems.push(format!(
            "{what}: prompt arguments are strings, but {} {} not",
            not_strings.join(", "),
            if not_strings.len() == 1 { "is" } else { "are" }
        ));
    }
    problems.extend(check_states(
        &what,
        prompt.workflow.as_ref(),
        &manifest.states,
    ));
    problems
}

/// The problems of one resource or template on its own and against its workflow's machine.
pub(super) fn check_resource(resource: &Resource) -> Vec<String> {
    let declared = &resource.declared;
    let what = format!("resource {}", declared.uri());
    let mut problems = Vec::new();
    if declared.name().trim().is_empty() {
        problems.push(format!("{what} has no name"));
    }
    if resource.text_on_template {
        problems.push(format!(
            "{what} is a template (it has a {{variable}}): give it a reader (.read), not .text"
        ));
    }
    if let Declared::Template(template) = declared {
        match uri_template::template_variables(&template.uri_template) {
            Err(problem) => problems.push(format!("{what}: {problem}")),
            Ok(variables)
                if variables.contains(&crate::HANDLE_VARIABLE) && resource.workflow.is_none() =>
            {
                problems.push(format!(
                    "{what} names an instance ({{handle}}), so it needs a workflow (start it \
                     with Workflow::resource)"
                ));
            }
            Ok(_) => {}
        }
    }
    problems.extend(check_states(
        &what,
        resource.workflow.as_ref(),
        declared.states(),
    ));
    problems
}

/// The problems of `states` bound by `what` in `workflow`.
fn check_states(what: &str, workflow: Option<&Workflow>, states: &[String]) -> Vec<String> {
    let Some(workflow) = workflow else {
        return if states.is_empty() {
            Vec::new()
        } else {
            vec![format!(
                "{what} is bound to states but to no workflow (start it from a Workflow)"
            )]
        };
    };
    let Ok(machine) = workflow.parsed() else {
        // Reported once, with the workflow.
        return Vec::new();
    };
    states
        .iter()
        .filter(|state| !machine.has_state(state))
        .map(|state| {
            format!(
                "{what}: workflow \"{}\" has no state \"{state}\"",
                workflow.id()
            )
        })
        .collect()
}

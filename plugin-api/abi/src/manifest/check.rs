//! The manifest's rules beyond its shape: [`Manifest::check`], the one place they are written.
//! The host runs it on every manifest it loads (after serde has read the shape), and the SDK's
//! `Toolkit::build` on the manifest it writes, so a plugin's own test fails where a host would
//! refuse it.
//!
//! It checks what needs nothing but the manifest itself: non-empty and unique names, MCP's
//! rule for tool names ([`check_tool_name`]), object input schemas, bindings that name a
//! workflow, URI templates that parse. It must not check bindings against the workflow
//! machines (does `invoice.submit`'s state exist?): that needs a statechart engine, and the
//! host's catalog does it across all plugins.

use std::collections::HashSet;

use serde_json::Value;

use super::{HANDLE_VARIABLE, MAX_QUICK_MS, Manifest};
use crate::uri_template;

/// MCP's limit on tool names.
pub const MAX_TOOL_NAME: usize = 128;

impl Manifest {
    /// The host's rules beyond the shape; the error is a one-line reason naming the field
    /// (`tools[1] (p.a): duplicate tool name`).
    pub fn check(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("name: must not be empty".into());
        }
        let mut workflow_ids = HashSet::new();
        for (i, machine) in self.workflows.iter().enumerate() {
            let id = machine
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .ok_or_else(|| {
                    format!(
                        "workflows[{i}]: a machine must be an object with a non-empty string \"id\""
                    )
                })?;
            if !workflow_ids.insert(id) {
                return Err(format!("workflows[{i}]: duplicate machine id {id:?}"));
            }
        }
        let mut tool_names = HashSet::new();
        for (i, tool) in self.tools.iter().enumerate() {
            let at = |problem: String| format!("tools[{i}] ({}): {problem}", tool.name);
            check_tool_name(&tool.name).map_err(|problem| format!("tools[{i}].name: {problem}"))?;
            if !tool_names.insert(tool.name.as_str()) {
                return Err(at("duplicate tool name".into()));
            }
            if tool.description.trim().is_empty() {
                return Err(at("description must not be empty".into()));
            }
            if tool
                .compact_description
                .as_deref()
                .is_some_and(|d| d.trim().is_empty())
            {
                return Err(at("compact_description must not be empty when given".into()));
            }
            if tool.input_schema.get("type").and_then(Value::as_str) != Some("object") {
                return Err(at(
                    r#"input_schema must be a JSON Schema object with "type": "object""#.into(),
                ));
            }
            if tool.workflow.is_none() && (!tool.states.is_empty() || tool.transition.is_some()) {
                return Err(at("states and transition need a workflow".into()));
            }
            let mut states = HashSet::new();
            for state in &tool.states {
                if state.is_empty() || !states.insert(state) {
                    return Err(at(format!("states: empty or duplicate state {state:?}")));
                }
            }
            if tool.transition.as_deref() == Some("") {
                return Err(at("transition must not be empty when given".into()));
            }
            if let Some(budget) = tool.quick_ms
                && !(1..=MAX_QUICK_MS).contains(&budget)
            {
                return Err(at(format!(
                    "quick_ms must be 1 to {MAX_QUICK_MS} (milliseconds), not {budget}; a slower tool \
                     leaves quick_ms out and runs on worker threads"
                )));
            }
        }
        check_prompts(self)?;
        check_resources(self)
    }
}

/// Prompts: valid unique names, a description, distinct arguments, states only with a workflow.
fn check_prompts(manifest: &Manifest) -> Result<(), String> {
    let mut names = HashSet::new();
    for (i, prompt) in manifest.prompts.iter().enumerate() {
        let at = |problem: String| format!("prompts[{i}] ({}): {problem}", prompt.name);
        check_tool_name(&prompt.name).map_err(|problem| format!("prompts[{i}].name: {problem}"))?;
        if !names.insert(prompt.name.as_str()) {
            return Err(at("duplicate prompt name".into()));
        }
        if prompt.description.trim().is_empty() {
            return Err(at("description must not be empty".into()));
        }
        let mut arguments = HashSet::new();
        for (j, argument) in prompt.arguments.iter().enumerate() {
            if argument.name.is_empty() || !arguments.insert(argument.name.as_str()) {
                return Err(at(format!(
                    "arguments[{j}]: empty or duplicate argument name {:?}",
                    argument.name
                )));
            }
        }
        check_binding(prompt.workflow.as_deref(), &prompt.states).map_err(at)?;
    }
    Ok(())
}

/// Resources and templates: unique URIs, names unique across both (`read` is asked by name),
/// templates that parse, `{handle}` only with a workflow, states only with a workflow.
fn check_resources(manifest: &Manifest) -> Result<(), String> {
    let mut names = HashSet::new();
    let mut uris = HashSet::new();
    for (i, resource) in manifest.resources.iter().enumerate() {
        let at = |problem: String| format!("resources[{i}] ({}): {problem}", resource.uri);
        if resource.uri.trim().is_empty() || resource.name.trim().is_empty() {
            return Err(format!("resources[{i}]: uri and name must not be empty"));
        }
        if resource.uri.contains('{') {
            return Err(at(
                "a URI with a {variable} is a template: declare it under resource_templates".into(),
            ));
        }
        if !uris.insert(resource.uri.as_str()) {
            return Err(at("duplicate resource uri".into()));
        }
        if !names.insert(resource.name.as_str()) {
            return Err(at(format!("duplicate resource name {:?}", resource.name)));
        }
        check_binding(resource.workflow.as_deref(), &resource.states).map_err(at)?;
    }
    for (i, template) in manifest.resource_templates.iter().enumerate() {
        let at = |problem: String| {
            format!(
                "resource_templates[{i}] ({}): {problem}",
                template.uri_template
            )
        };
        if template.name.trim().is_empty() {
            return Err(at("name must not be empty".into()));
        }
        let variables = uri_template::template_variables(&template.uri_template).map_err(at)?;
        if variables.is_empty() {
            return Err(at(
                "a URI without a {variable} is a fixed resource: declare it under resources".into(),
            ));
        }
        if variables.contains(&HANDLE_VARIABLE) && template.workflow.is_none() {
            return Err(at(format!(
                "{{{HANDLE_VARIABLE}}} names a workflow instance, so the template needs a workflow"
            )));
        }
        if !uris.insert(template.uri_template.as_str()) {
            return Err(at("duplicate uri_template".into()));
        }
        if !names.insert(template.name.as_str()) {
            return Err(at(format!("duplicate resource name {:?}", template.name)));
        }
        check_binding(template.workflow.as_deref(), &template.states).map_err(at)?;
    }
    Ok(())
}

/// States need a workflow and are distinct and non-empty (as for tools).
fn check_binding(workflow: Option<&str>, states: &[String]) -> Result<(), String> {
    if workflow.is_none() && !states.is_empty() {
        return Err("states need a workflow".into());
    }
    let mut seen = HashSet::new();
    match states
        .iter()
        .find(|state| state.is_empty() || !seen.insert(*state))
    {
        Some(state) => Err(format!("states: empty or duplicate state {state:?}")),
        None => Ok(()),
    }
}

/// MCP's rule for tool names, which prompt names follow too: 1 to [`MAX_TOOL_NAME`] characters
/// of `A-Z a-z 0-9 _ - .`. The error says what is wrong with `name`.
pub fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TOOL_NAME {
        return Err(format!("must be 1 to {MAX_TOOL_NAME} characters long"));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        Some(c) => Err(format!(
            "{name:?} contains {c:?}; use only A-Z a-z 0-9 _ - ."
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str) -> Value {
        json!({"name": name, "description": "d", "input_schema": {"type": "object"}})
    }

    /// The manifest `value` describes, checked (every value here has the right shape).
    fn parse_value(value: Value) -> Result<Manifest, String> {
        let manifest: Manifest = serde_json::from_value(value).map_err(|err| err.to_string())?;
        manifest.check().map(|()| manifest)
    }

    #[test]
    fn local_rules_are_enforced() {
        let cases = [
            (
                json!({"name": "p", "version": "1", "tools": [tool("p.a"), tool("p.a")]}),
                "duplicate tool name",
            ),
            (
                json!({"name": "p", "version": "1", "tools": [tool("p a")]}),
                "contains ' '",
            ),
            (
                json!({"name": "p", "version": "1", "tools": [tool("")]}),
                "1 to 128",
            ),
            (
                json!({"name": "p", "version": "1", "tools": [{"name": "p.a", "description": "d", "input_schema": {"type": "string"}}]}),
                "\"type\": \"object\"",
            ),
            (
                json!({"name": "p", "version": "1", "tools": [{"name": "p.a", "description": "d", "input_schema": {"type": "object"}, "states": ["s"]}]}),
                "need a workflow",
            ),
            (
                json!({"name": "p", "version": "1", "workflows": [{"initial": "a"}]}),
                "non-empty string \"id\"",
            ),
            (
                json!({"name": "p", "version": "1", "workflows": [{"id": "w"}, {"id": "w"}]}),
                "duplicate machine id",
            ),
            (
                json!({"name": " ", "version": "1"}),
                "name: must not be empty",
            ),
            (
                json!({"name": "p", "version": "1", "tools": [{"name": "p.a", "description": "d", "input_schema": {"type": "object"}, "quick_ms": 500}]}),
                "quick_ms must be 1 to 20",
            ),
        ];
        for (manifest, expected) in cases {
            let err = parse_value(manifest.clone()).unwrap_err();
            assert!(err.contains(expected), "{manifest}: {err}");
        }
    }

    #[test]
    fn prompt_and_resource_problems_name_the_entry() {
        let with = |field: &str, entries: Value| {
            let mut manifest = json!({"name": "p", "version": "1"});
            manifest[field] = entries;
            parse_value(manifest)
        };
        let prompt = |name: &str| json!({"name": name, "description": "d"});
        let cases = [
            (
                with("prompts", json!([prompt("p.a"), prompt("p.a")])),
                "prompts[1] (p.a): duplicate prompt name",
            ),
            (
                with(
                    "prompts",
                    json!([{"name": "p.a", "description": "d", "states": ["s"]}]),
                ),
                "prompts[0] (p.a): states need a workflow",
            ),
            (
                with(
                    "prompts",
                    json!([{"name": "p.a", "description": "d",
                    "arguments": [{"name": "x"}, {"name": "x"}]}]),
                ),
                "arguments[1]: empty or duplicate argument name \"x\"",
            ),
            (
                with("resources", json!([{"uri": "a://{x}", "name": "a"}])),
                "declare it under resource_templates",
            ),
            (
                with(
                    "resource_templates",
                    json!([{"uri_template": "a://{handle}",
                    "name": "a"}]),
                ),
                "resource_templates[0] (a://{handle}): {handle} names a workflow instance",
            ),
            (
                with(
                    "resource_templates",
                    json!([{"uri_template": "a://{+x}", "name": "a"}]),
                ),
                "no operators",
            ),
        ];
        for (result, expected) in cases {
            let err = result.unwrap_err();
            assert!(err.contains(expected), "{err}");
        }
        let err = parse_value(json!({"name": "p", "version": "1",
            "resources": [{"uri": "a://x", "name": "a"}],
            "resource_templates": [{"uri_template": "b://{x}", "name": "a"}]}))
        .unwrap_err();
        assert!(err.contains("duplicate resource name \"a\""), "{err}");
    }
}

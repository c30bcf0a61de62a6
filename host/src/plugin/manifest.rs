//! Parsing and checking a plugin's manifest JSON.
//!
//! This module owns the checks that need nothing but the manifest itself: shape (through the
//! serde types of `turnstile-plugin-api`, with the JSON path of the first mismatch) and local
//! consistency. It must not check bindings against workflow machines (does `invoice.submit`'s
//! state exist?): the catalog does that with the statechart engine, across all plugins.

use std::collections::HashSet;

use serde_json::Value;
use turnstile_plugin_api::{MAX_QUICK_MS, Manifest};

/// MCP's limit on tool names.
const MAX_TOOL_NAME: usize = 128;

/// Parses `bytes` and checks the result; the error is a one-line reason naming the field.
pub(super) fn parse(bytes: &[u8]) -> Result<Manifest, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let manifest: Manifest = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })?;
    de.end().map_err(|err| err.to_string())?;
    check(&manifest)?;
    Ok(manifest)
}

/// The host's own rules beyond the shape.
fn check(manifest: &Manifest) -> Result<(), String> {
    if manifest.name.trim().is_empty() {
        return Err("name: must not be empty".into());
    }
    let mut workflow_ids = HashSet::new();
    for (i, machine) in manifest.workflows.iter().enumerate() {
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
    for (i, tool) in manifest.tools.iter().enumerate() {
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
    Ok(())
}

/// MCP tool names: 1 to 128 characters of `A-Z a-z 0-9 _ - .`.
fn check_tool_name(name: &str) -> Result<(), String> {
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

    fn parse_value(value: Value) -> Result<Manifest, String> {
        parse(value.to_string().as_bytes())
    }

    #[test]
    fn accepts_a_minimal_manifest() {
        let manifest =
            parse_value(json!({"name": "p", "version": "1", "tools": [tool("p.a")]})).unwrap();
        assert_eq!(manifest.tools[0].name, "p.a");
    }

    #[test]
    fn shape_errors_name_the_field() {
        let mut bad = tool("p.a");
        bad["states"] = json!("draft");
        let err = parse_value(json!({"name": "p", "version": "1", "tools": [tool("p.b"), bad]}))
            .unwrap_err();
        assert!(
            err.starts_with("tools[1].states: invalid type: string"),
            "{err}"
        );
        let err = parse(b"{\"name\": \"p\"").unwrap_err();
        assert!(err.contains("EOF"), "{err}");
        let err = parse(b"{\"name\":\"p\",\"version\":\"1\"} trailing").unwrap_err();
        assert!(err.contains("trailing"), "{err}");
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
}

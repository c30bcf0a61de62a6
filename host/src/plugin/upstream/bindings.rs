//! The manifest of an upstream: what its file binds, applied to the tools it lists.
//!
//! An upstream is offered to the catalog exactly as a library is, by a [`Manifest`]: its tools
//! renamed `NAME.<tool>`, each bound as its `[tools.<tool>]` says (or, unnamed, ungated or
//! hidden as `unlisted` says), and the file's machine as its one workflow. Whether the bound
//! states and events exist in the machine is the catalog's check, as for a library. A binding
//! naming a tool the upstream does not list is refused here, alone: the rest is served, and the
//! refusal is a note the loader reports.

use serde_json::{Map, Value, json};
use turnstile_plugin_abi::{Manifest, ToolManifest, manifest::ToolAnnotations};

use super::file::{Unlisted, UpstreamFile};

/// One tool as the upstream lists it (`tools/list`), in the plain terms the manifest needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
}

/// What an upstream offers, and the bindings refused on the way.
#[derive(Debug, Clone)]
pub struct Offer {
    pub manifest: Manifest,
    /// One line per binding refused (it names a tool the upstream does not have).
    pub notes: Vec<String>,
}

/// The manifest for `file`'s upstream, which calls itself `version` and lists `listed`.
pub fn offer(file: &UpstreamFile, version: &str, listed: &[ListedTool]) -> Offer {
    let workflow = file.workflow().to_owned();
    let mut tools = Vec::new();
    for tool in listed {
        let binding = file.tools.get(&tool.name);
        let hidden = match binding {
            Some(binding) => binding.hidden,
            None => file.unlisted == Unlisted::Hidden,
        };
        if hidden {
            continue;
        }
        let annotations = ToolAnnotations {
            read_only_hint: binding.and_then(|b| b.read_only).or(tool.read_only),
            destructive_hint: tool.destructive,
            idempotent_hint: tool.idempotent,
            open_world_hint: tool.open_world,
        };
        let annotations = (annotations != ToolAnnotations::default()).then_some(annotations);
        let description = binding
            .and_then(|b| b.description.clone())
            .or_else(|| tool.description.clone())
            .unwrap_or_default();
        tools.push(ToolManifest {
            name: offered_name(&file.name, &tool.name),
            description,
            compact_description: binding.and_then(|b| b.compact_description.clone()),
            input_schema: object_schema(&tool.input_schema),
            workflow: binding.map(|_| workflow.clone()),
            states: binding.map(|b| b.states.clone()).unwrap_or_default(),
            transition: binding.and_then(|b| b.fires.clone()),
            on_error: binding.and_then(|b| b.on_error.clone()),
            title: tool.title.clone(),
            annotations,
            output_schema: tool.output_schema.clone(),
            quick_ms: None,
            usage_note: true,
            // Whether the upstream asks the person is known only when it does (it asks during
            // the call), so every call is served where the person can be asked.
            asks: true,
            confirm: binding.and_then(|b| b.confirm.clone()),
        });
    }
    let notes = file
        .tools
        .keys()
        .filter(|name| !listed.iter().any(|tool| &&tool.name == name))
        .map(|name| {
            format!(
                "tools.{name}: the upstream has no tool named {name:?} (it lists {}); this \
                 binding is refused, the rest is served",
                listed_names(listed)
            )
        })
        .collect();
    Offer {
        manifest: Manifest {
            name: file.name.clone(),
            version: version.to_owned(),
            workflows: vec![file.machine.clone()],
            tools,
            guards: Vec::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            resource_templates: Vec::new(),
            isolate: false,
            test_fixture: false,
        },
        notes,
    }
}

/// The name a client sees for the upstream's tool `tool`.
pub fn offered_name(prefix: &str, tool: &str) -> String {
    format!("{prefix}.{tool}")
}

/// The upstream's name of the tool a client calls `offered`, if it is one of `prefix`'s.
pub fn upstream_name<'a>(prefix: &str, offered: &'a str) -> Option<&'a str> {
    offered.strip_prefix(prefix)?.strip_prefix('.')
}

/// An input schema the host can extend with its handle property: an object schema. MCP says a
/// tool's `inputSchema` is one; a server that sends something else gets `{"type": "object"}`
/// around what it sent.
fn object_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) if map.get("type") == Some(&json!("object")) => schema.clone(),
        Value::Object(map) if !map.contains_key("type") => {
            let mut map: Map<String, Value> = map.clone();
            map.insert("type".into(), json!("object"));
            Value::Object(map)
        }
        _ => json!({"type": "object"}),
    }
}

fn listed_names(listed: &[ListedTool]) -> String {
    if listed.is_empty() {
        return "no tools".into();
    }
    listed
        .iter()
        .map(|tool| tool.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {

    use super::*;

    fn listed(name: &str) -> ListedTool {
        ListedTool {
            name: name.into(),
            title: None,
            description: Some(format!("{name} it")),
            input_schema: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            output_schema: None,
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
        }
    }

    fn file(unlisted: &str) -> UpstreamFile {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("m.json"),
            r#"{"id":"desk","initial":"new","states":{"new":{"on":{"OPEN":"open"}},"open":{}}}"#,
        )
        .unwrap();
        let text = format!(
            "name = \"desk\"\ncommand = [\"x\"]\nmachine = \"m.json\"\nunlisted = \"{unlisted}\"\n\
             [tools.open]\nstates = [\"new\"]\nfires = \"OPEN\"\ndescription = \"Open a ticket.\"\n\
             [tools.purge]\nhidden = true\n[tools.gone]\nstates = [\"open\"]\n"
        );
        UpstreamFile::parse(dir.path(), &text).unwrap()
    }

    #[test]
    fn bound_tools_are_renamed_and_bound_hidden_ones_are_left_out() {
        let tools = [listed("open"), listed("purge"), listed("status")];
        let offer = offer(&file("ungated"), "1.0", &tools);
        let names: Vec<_> = offer
            .manifest
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["desk.open", "desk.status"]);
        let open = &offer.manifest.tools[0];
        assert_eq!(open.workflow.as_deref(), Some("desk"));
        assert_eq!(open.states, ["new"]);
        assert_eq!(open.transition.as_deref(), Some("OPEN"));
        assert_eq!(open.description, "Open a ticket.");
        let status = &offer.manifest.tools[1];
        assert_eq!(
            (status.workflow.as_deref(), status.description.as_str()),
            (None, "status it")
        );
        assert_eq!(offer.manifest.workflows[0]["id"], "desk");
        offer.manifest.check().unwrap();
    }

    #[test]
    fn unlisted_hidden_offers_only_the_bound_tools() {
        let tools = [listed("open"), listed("status")];
        let offer = offer(&file("hidden"), "1.0", &tools);
        let names: Vec<_> = offer
            .manifest
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["desk.open"]);
    }

    #[test]
    fn a_binding_of_a_missing_tool_is_a_note_and_the_rest_is_served() {
        let offer = offer(&file("ungated"), "1.0", &[listed("open")]);
        assert_eq!(offer.notes.len(), 2, "{:?}", offer.notes);
        assert!(offer.notes[0].starts_with("tools.gone: the upstream has no tool named \"gone\""));
        assert!(offer.notes[1].starts_with("tools.purge: "));
        assert_eq!(offer.manifest.tools.len(), 1);
    }

    #[test]
    fn names_map_both_ways() {
        assert_eq!(offered_name("desk", "open"), "desk.open");
        assert_eq!(upstream_name("desk", "desk.open"), Some("open"));
        assert_eq!(upstream_name("desk", "desk2.open"), None);
    }
}

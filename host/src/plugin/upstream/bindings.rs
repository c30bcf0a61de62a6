//! The manifest of an upstream: what its file binds, applied to the tools it lists.
//!
//! An upstream is offered to the catalog exactly as a library is, by a [`Manifest`]: its tools
//! renamed `NAME.<tool>`, each bound as its `[tools.<tool>]` says (or, unnamed, ungated or
//! hidden as `unlisted` says), and the file's machine as its one workflow. Whether the bound
//! states and events exist in the machine is the catalog's check, as for a library. A binding
//! naming a tool the upstream does not list is refused here, alone: the rest is served, and the
//! refusal is a note the loader reports.

use std::collections::HashSet;

use serde_json::{Map, Value, json};
use turnstile_plugin_abi::{
    Manifest, ToolManifest,
    manifest::{
        PromptArgumentManifest, PromptManifest, ResourceManifest, ResourceTemplateManifest,
        ToolAnnotations,
    },
};

use super::{
    file::{PrimitiveBinding, Unlisted, UpstreamFile},
    link::Primitives,
};

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

/// The manifest for `file`'s upstream, which calls itself `version` and lists the tools
/// `listed` and the prompts and resources `primitives`.
pub fn offer(
    file: &UpstreamFile,
    version: &str,
    listed: &[ListedTool],
    primitives: &Primitives,
) -> Offer {
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
            on_cancel: binding.and_then(|b| b.on_cancel.clone()),
            title: tool.title.clone(),
            annotations,
            output_schema: tool.output_schema.clone(),
            quick_ms: None,
            usage_note: true,
            // Whether the upstream asks the person is known only when it does (it asks during
            // the call), so every call is served where the person can be asked.
            asks: true,
            confirm: binding.and_then(|b| b.confirm.clone()),
            // rmcp's client model of a tool (3.11) has no `execution`: an upstream's own task
            // support cannot be read, so only its binding makes its calls tasks.
            task: binding.and_then(|b| b.task),
        });
    }
    let mut notes: Vec<String> = file
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
    let prompts = offer_prompts(file, &primitives.prompts, &mut notes);
    let (resources, resource_templates) = offer_resources(file, primitives, &mut notes);
    Offer {
        manifest: Manifest {
            name: file.name.clone(),
            version: version.to_owned(),
            workflows: vec![file.machine.clone()],
            tools,
            guards: Vec::new(),
            prompts,
            resources,
            resource_templates,
            isolate: false,
            test_fixture: false,
        },
        notes,
    }
}

/// Whether the prompt or resource bound by `binding` (or by none) is left out.
fn hidden(file: &UpstreamFile, binding: Option<&PrimitiveBinding>) -> bool {
    binding.map_or(file.unlisted == Unlisted::Hidden, |binding| binding.hidden)
}

/// The upstream's prompts, renamed `NAME.prompt` like its tools and bound as `[prompts.…]` says.
fn offer_prompts(
    file: &UpstreamFile,
    prompts: &[Value],
    notes: &mut Vec<String>,
) -> Vec<PromptManifest> {
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut offered = Vec::new();
    for prompt in prompts {
        let Some(name) = text(prompt, "name") else {
            continue;
        };
        let binding = file.prompts.get(&name);
        if hidden(file, binding) {
            continue;
        }
        let arguments = prompt["arguments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|argument| {
                Some(PromptArgumentManifest {
                    name: text(argument, "name")?,
                    description: text(argument, "description"),
                    required: argument["required"].as_bool().unwrap_or(false),
                })
            })
            .collect();
        offered.push(PromptManifest {
            name: offered_name(&file.name, &name),
            title: text(prompt, "title"),
            description: text(prompt, "description")
                .filter(|description| !description.trim().is_empty())
                .unwrap_or_else(|| format!("The prompt {name}.")),
            arguments,
            workflow: binding.map(|_| file.workflow().to_owned()),
            states: binding.map(|b| b.states.clone()).unwrap_or_default(),
            text: None,
            asks: false,
        });
    }
    for name in file.prompts.keys() {
        if !prompts
            .iter()
            .any(|prompt| prompt["name"].as_str() == Some(name))
        {
            notes.push(format!(
                "prompts.{name}: the upstream has no prompt named {name:?}; this binding is \
                 refused, the rest is served"
            ));
        }
    }
    offered
}

/// The upstream's resources and templates under their own URIs (a URI cannot be renamed),
/// bound as `[resources."URI or template"]` says.
fn offer_resources(
    file: &UpstreamFile,
    primitives: &Primitives,
    notes: &mut Vec<String>,
) -> (Vec<ResourceManifest>, Vec<ResourceTemplateManifest>) {
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    // `read` is asked by name, so names are made unique: a second resource of a name is known
    // by its URI.
    let mut names = HashSet::new();
    let mut unique = |name: Option<String>, uri: &str| match name {
        Some(name) if names.insert(name.clone()) => name,
        _ => {
            names.insert(uri.to_owned());
            uri.to_owned()
        }
    };
    let mut resources = Vec::new();
    for resource in &primitives.resources {
        let Some(uri) = text(resource, "uri") else {
            continue;
        };
        let binding = file.resources.get(&uri);
        if hidden(file, binding) {
            continue;
        }
        resources.push(ResourceManifest {
            name: unique(text(resource, "name"), &uri),
            uri,
            title: text(resource, "title"),
            description: text(resource, "description"),
            mime_type: text(resource, "mimeType"),
            workflow: binding.map(|_| file.workflow().to_owned()),
            states: binding.map(|b| b.states.clone()).unwrap_or_default(),
            text: None,
        });
    }
    let mut templates = Vec::new();
    for template in &primitives.templates {
        let Some(uri_template) = text(template, "uriTemplate") else {
            continue;
        };
        let binding = file.resources.get(&uri_template);
        if hidden(file, binding) {
            continue;
        }
        templates.push(ResourceTemplateManifest {
            name: unique(text(template, "name"), &uri_template),
            uri_template,
            title: text(template, "title"),
            description: text(template, "description"),
            mime_type: text(template, "mimeType"),
            workflow: binding.map(|_| file.workflow().to_owned()),
            states: binding.map(|b| b.states.clone()).unwrap_or_default(),
        });
    }
    for uri in file.resources.keys() {
        let listed =
            |items: &[Value], key: &str| items.iter().any(|item| item[key].as_str() == Some(uri));
        if !listed(&primitives.resources, "uri") && !listed(&primitives.templates, "uriTemplate") {
            notes.push(format!(
                "resources.{uri:?}: the upstream has no resource or template {uri:?}; this \
                 binding is refused, the rest is served"
            ));
        }
    }
    (resources, templates)
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
        let offer = offer(&file("ungated"), "1.0", &tools, &Primitives::default());
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
        let offer = offer(&file("hidden"), "1.0", &tools, &Primitives::default());
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
        let offer = offer(
            &file("ungated"),
            "1.0",
            &[listed("open")],
            &Primitives::default(),
        );
        assert_eq!(offer.notes.len(), 2, "{:?}", offer.notes);
        assert!(offer.notes[0].starts_with("tools.gone: the upstream has no tool named \"gone\""));
        assert!(offer.notes[1].starts_with("tools.purge: "));
        assert_eq!(offer.manifest.tools.len(), 1);
    }

    #[test]
    fn prompts_are_renamed_and_resources_keep_their_uris() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("m.json"),
            r#"{"id":"desk","initial":"new","states":{"new":{},"open":{}}}"#,
        )
        .unwrap();
        let text = "name = \"desk\"\ncommand = [\"x\"]\nmachine = \"m.json\"\n\
                    [prompts.triage]\nstates = [\"open\"]\n[resources.\"desk://gone\"]\n";
        let file = UpstreamFile::parse(dir.path(), text).unwrap();
        let primitives = Primitives {
            prompts: vec![
                json!({"name": "triage", "arguments": [{"name": "title", "required": true}]}),
                json!({"name": "free", "description": "Free."}),
            ],
            resources: vec![json!({"uri": "desk://policy", "name": "policy"})],
            templates: vec![json!({"uriTemplate": "desk://t/{id}", "name": "policy"})],
        };
        let offer = offer(&file, "1", &[], &primitives);
        let prompts = &offer.manifest.prompts;
        assert_eq!(prompts[0].name, "desk.triage");
        assert_eq!(
            (prompts[0].workflow.as_deref(), &prompts[0].states[..]),
            (Some("desk"), &["open".to_owned()][..])
        );
        assert!(prompts[0].arguments[0].required);
        assert_eq!(
            (prompts[1].name.as_str(), prompts[1].workflow.as_deref()),
            ("desk.free", None)
        );
        assert_eq!(offer.manifest.resources[0].uri, "desk://policy");
        // Names are what a read is asked by: the template's clash is known by its template.
        assert_eq!(offer.manifest.resource_templates[0].name, "desk://t/{id}");
        assert!(
            offer
                .notes
                .iter()
                .any(|note| note.starts_with("resources.\"desk://gone\""))
        );
        offer.manifest.check().unwrap();
    }

    #[test]
    fn names_map_both_ways() {
        assert_eq!(offered_name("desk", "open"), "desk.open");
        assert_eq!(upstream_name("desk", "desk.open"), Some("open"));
        assert_eq!(upstream_name("desk", "desk2.open"), None);
    }
}

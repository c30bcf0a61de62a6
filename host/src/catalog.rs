//! The catalog: every tool, prompt, resource and workflow machine the loaded plugins bring,
//! checked against each other.
//!
//! It owns the answer to "which tool is this name, which plugin runs it, which machine gates it",
//! and the same for prompts and resources (`primitives.rs`).
//! A catalog is never changed once built: a plugin reload builds a new one and swaps it into the
//! [`LiveCatalog`] (`live.rs`); `gate::CatalogChange` says whose menus that changes.
//! Each machine carries a version, the hash of its canonical JSON (`version.rs`). It never runs a
//! tool and never touches instance state.
//!
//! A plugin is admitted whole or not at all: if one of its machines fails to parse, or one of its
//! tools, prompts or resources names a state or event its machine does not have, the whole plugin is refused with every
//! problem listed, and the other plugins are still served.

mod guards;
mod live;
mod offered;
pub mod param_headers;
mod primitives;
mod version;

use std::{collections::BTreeMap, fmt, path::PathBuf, sync::Arc};

use serde_json::Value;

pub use self::{
    guards::{GuardAnswers, GuardQuestion, PluginGuards, Unavailable},
    live::{LiveCatalog, served_task_tools},
    offered::offered,
    primitives::{Bound, PromptEntry, ResourceEntry, SESSION_TOKEN, TemplateEntry},
    version::{canonical, machine_version},
};

use crate::{
    confirm::Confirmation,
    plugin::{LoadedPlugin, ToolManifest},
    statechart::{Machine, Snapshot},
};

/// One workflow machine and the tools bound to it.
pub struct Workflow {
    pub id: String,
    /// The machine's version: [`machine_version`] of its definition.
    pub version: String,
    /// The machine's definition as the plugin gave it (XState JSON).
    pub definition: Value,
    pub machine: Arc<Machine>,
    /// The tools whose `workflow` is this one, in catalog order. An instance that keeps running
    /// on this version after a plugin reload (see [`Catalog::follow`]) keeps these tools, and
    /// with them the plugin that runs them.
    pub tools: Vec<Arc<ToolEntry>>,
    /// Restored from the machine definition kept in the state store ([`Workflow::archived`]):
    /// no loaded plugin brings this version any more, so its tools cannot run.
    pub archived: bool,
}

impl Workflow {
    /// A machine version no loaded plugin brings, rebuilt from the definition the state store
    /// kept, so that an instance pinned to it can still be read. It has no tools: calls on it
    /// are refused (`VERSION_UNAVAILABLE`) until the instance can move to a loaded version.
    pub fn archived(definition: Value) -> Result<Workflow, String> {
        let machine = Machine::from_json_with_guards(&definition, Arc::new(Unavailable))
            .map_err(|error| error.to_string())?;
        Ok(Workflow {
            id: machine.id().to_string(),
            version: machine_version(&definition),
            definition,
            machine: Arc::new(machine),
            tools: Vec::new(),
            archived: true,
        })
    }

    /// This version's tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.tools.iter().find(|tool| tool.name() == name)
    }
}

impl fmt::Debug for Workflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workflow")
            .field("id", &self.id)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// One tool, ready to be listed, gated and called.
pub struct ToolEntry {
    pub manifest: ToolManifest,
    pub plugin: Arc<LoadedPlugin>,
    /// Compiled once here, so argument checking on the call path costs no parsing.
    validator: jsonschema::Validator,
    /// The compiled `output_schema`, when the manifest gives one.
    output_validator: Option<jsonschema::Validator>,
    /// The compiled `confirm`, when the manifest gives one (`confirm.rs`).
    pub confirm: Option<Confirmation>,
}

impl ToolEntry {
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    pub fn workflow(&self) -> Option<&str> {
        self.manifest.workflow.as_deref()
    }

    /// Whether a call of this tool may ask the person or the client for input (`mcp/handler/asking.rs`):
    /// the handler says it may, or the binding has a person confirm.
    pub fn asks(&self) -> bool {
        self.manifest.asks || self.confirm.is_some()
    }

    /// Whether a call of this tool may fire an event: its transition on success, its
    /// `on_error` on a handler error, its `on_cancel` when cancelled. A tool that fires nothing
    /// only reads the instance.
    pub fn fires_something(&self) -> bool {
        let manifest = &self.manifest;
        manifest.transition.is_some() || manifest.on_error.is_some() || manifest.on_cancel.is_some()
    }

    /// A tool with no bound states is visible in every state (DESIGN: "a tool with no states is
    /// always visible").
    pub fn is_gated(&self) -> bool {
        !self.manifest.states.is_empty()
    }

    /// Checks call arguments against the tool's input schema; returns every problem, each naming
    /// where in the arguments it is.
    pub fn check_arguments(&self, arguments: &Value) -> Result<(), Vec<String>> {
        schema_problems(&self.validator, arguments)
    }

    /// Checks a successful output against the output convention: `_content`, if present, is a
    /// list of content blocks (objects with a string `type`), and the structured part (the
    /// output without `_content`) matches the tool's `output_schema`, if it has one. Run before
    /// anything else happens with the output, so a bad one fires nothing.
    pub fn check_output(&self, output: &Value) -> Result<(), Vec<String>> {
        let content = output.get(CONTENT_KEY);
        if let Some(content) = content {
            let blocks_ok = content.as_array().is_some_and(|blocks| {
                blocks
                    .iter()
                    .all(|block| block.get("type").is_some_and(Value::is_string))
            });
            if !blocks_ok {
                return Err(vec![format!(
                    "{CONTENT_KEY} must be a list of content blocks, each an object with a \
                     string \"type\""
                )]);
            }
        }
        let Some(validator) = &self.output_validator else {
            return Ok(());
        };
        match (content, output) {
            (Some(_), Value::Object(object)) => {
                let mut structured = object.clone();
                structured.remove(CONTENT_KEY);
                schema_problems(validator, &Value::Object(structured))
            }
            _ => schema_problems(validator, output),
        }
    }
}

/// The key under which a plugin's output object carries MCP content blocks (the output
/// convention in `turnstile_plugin_abi`'s docs).
pub const CONTENT_KEY: &str = "_content";

/// Every way `value` fails `validator`, each naming where in the value it is.
fn schema_problems(validator: &jsonschema::Validator, value: &Value) -> Result<(), Vec<String>> {
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|error| {
            let at = error.instance_path().to_string();
            if at.is_empty() {
                error.to_string()
            } else {
                format!("{at}: {error}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Why a plugin was refused by the catalog (it loaded, but does not fit).
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogError {
    pub plugin: PathBuf,
    pub problems: Vec<String>,
}

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: refused: {}",
            self.plugin.display(),
            self.problems.join("; ")
        )
    }
}

impl std::error::Error for CatalogError {}

/// All admitted tools and workflows.
#[derive(Default)]
pub struct Catalog {
    tools: BTreeMap<String, Arc<ToolEntry>>,
    workflows: BTreeMap<String, Arc<Workflow>>,
    plugins: Vec<Arc<LoadedPlugin>>,
    /// Prompts, resources and resource templates (`primitives.rs`).
    primitives: primitives::Primitives,
}

impl Catalog {
    /// Admits each plugin that fits, in order; a plugin that clashes with one admitted earlier
    /// (same tool or workflow name) is refused.
    pub fn build(plugins: Vec<LoadedPlugin>) -> (Catalog, Vec<CatalogError>) {
        let mut catalog = Catalog::default();
        let mut errors = Vec::new();
        for plugin in plugins {
            let plugin = Arc::new(plugin);
            match catalog.check_plugin(&plugin) {
                Ok(admitted) => catalog.admit(plugin, admitted),
                Err(problems) => errors.push(CatalogError {
                    plugin: plugin.path().to_path_buf(),
                    problems,
                }),
            }
        }
        (catalog, errors)
    }

    /// A catalog of machines alone (given as XState JSON), for tests of the layers below the
    /// plugins.
    #[cfg(test)]
    pub fn with_machines(definitions: Vec<Value>) -> Catalog {
        let mut catalog = Catalog::default();
        for definition in definitions {
            let machine = Machine::from_json(&definition).expect("a test machine is valid");
            let id = machine.id().to_string();
            let workflow = Workflow {
                id: id.clone(),
                version: machine_version(&definition),
                definition,
                machine: Arc::new(machine),
                tools: Vec::new(),
                archived: false,
            };
            catalog.workflows.insert(id, Arc::new(workflow));
        }
        catalog
    }

    pub fn tool(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.tools.get(name)
    }

    pub fn tools(&self) -> impl Iterator<Item = &Arc<ToolEntry>> {
        self.tools.values()
    }

    pub fn workflow(&self, id: &str) -> Option<&Arc<Workflow>> {
        self.workflows.get(id)
    }

    /// Whether `other` holds the same prompts, resources and templates (a change of any is
    /// told to every client).
    pub fn same_primitives_as(&self, other: &Catalog) -> bool {
        self.primitives.same_as(&other.primitives)
    }

    pub fn workflows(&self) -> impl Iterator<Item = &Arc<Workflow>> {
        self.workflows.values()
    }

    pub fn plugins(&self) -> &[Arc<LoadedPlugin>] {
        &self.plugins
    }

    pub fn prompt(&self, name: &str) -> Option<&Arc<PromptEntry>> {
        self.primitives.prompts.get(name)
    }

    pub fn prompts(&self) -> impl Iterator<Item = &Arc<PromptEntry>> {
        self.primitives.prompts.values()
    }

    /// The resource with the fixed URI `uri`.
    pub fn resource(&self, uri: &str) -> Option<&Arc<ResourceEntry>> {
        self.primitives.resources.get(uri)
    }

    pub fn resources(&self) -> impl Iterator<Item = &Arc<ResourceEntry>> {
        self.primitives.resources.values()
    }

    pub fn templates(&self) -> impl Iterator<Item = &Arc<TemplateEntry>> {
        self.primitives.templates.values()
    }

    /// The template `uri` is a resource of, with its variables' values. Templates are tried in
    /// the order of their URI templates; the first that matches wins.
    pub fn template_for(
        &self,
        uri: &str,
    ) -> Option<(&Arc<TemplateEntry>, BTreeMap<String, String>)> {
        self.templates()
            .find_map(|template| template.matches(uri).map(|variables| (template, variables)))
    }

    /// The machine an instance running on `running`, in `snapshot`, should run on now that this
    /// catalog is served; `None`: stay. The rule (docs/plugins.md, "Hot plugins"): an instance
    /// whose current state exists in this catalog's machine continues on it (its snapshot
    /// restored into it); one whose state vanished keeps the machine it runs on, with that
    /// machine's states, until it reaches a final state.
    pub fn follow(
        &self,
        running: &Arc<Workflow>,
        snapshot: &Snapshot,
    ) -> Option<(Arc<Workflow>, Snapshot)> {
        let latest = self.workflow(&running.id)?;
        if Arc::ptr_eq(latest, running) {
            return None;
        }
        let moved = latest.machine.restore(&snapshot.to_persisted()).ok()?;
        Some((latest.clone(), moved))
    }

    /// Everything a plugin would add, or every reason it cannot be added.
    fn check_plugin(&self, plugin: &LoadedPlugin) -> Result<Admitted, Vec<String>> {
        let manifest = plugin.manifest();
        let mut problems = Vec::new();
        let mut machines = BTreeMap::new();
        let guards = Arc::new(PluginGuards::new(plugin.clone()));
        for (index, definition) in manifest.workflows.iter().enumerate() {
            match Machine::from_json_with_guards(definition, guards.clone()) {
                Ok(machine) => {
                    let id = machine.id().to_string();
                    if self.workflows.contains_key(&id) || machines.contains_key(&id) {
                        problems.push(format!(
                            "workflows[{index}]: workflow \"{id}\" is already defined"
                        ));
                    } else {
                        machines.insert(id, (definition.clone(), Arc::new(machine)));
                    }
                }
                Err(error) => problems.push(format!("workflows[{index}] (machine): {error}")),
            }
        }
        let mut tools = Vec::new();
        for (index, tool) in manifest.tools.iter().enumerate() {
            let at = format!("tools[{index}] \"{}\"", tool.name);
            if self.tools.contains_key(&tool.name)
                || manifest.tools[..index].iter().any(|t| t.name == tool.name)
            {
                problems.push(format!("{at}: tool name is already taken"));
            }
            for problem in param_headers::problems(&tool.input_schema) {
                problems.push(format!("{at}: {problem}"));
            }
            let validator = match jsonschema::validator_for(&tool.input_schema) {
                Ok(validator) => Some(validator),
                Err(error) => {
                    problems.push(format!(
                        "{at}: input schema is not a valid JSON Schema: {error}"
                    ));
                    None
                }
            };
            let output_validator = match &tool.output_schema {
                None => None,
                Some(schema) if schema.get("type") != Some(&Value::from("object")) => {
                    problems.push(format!(
                        r#"{at}: output schema must be a JSON Schema object with "type": "object""#
                    ));
                    None
                }
                Some(schema) => match jsonschema::validator_for(schema) {
                    Ok(validator) => Some(validator),
                    Err(error) => {
                        problems.push(format!(
                            "{at}: output schema is not a valid JSON Schema: {error}"
                        ));
                        None
                    }
                },
            };
            let confirm = match tool.confirm.as_ref().map(Confirmation::compile) {
                None => None,
                Some(Ok(confirm)) => Some(confirm),
                Some(Err(problem)) => {
                    problems.push(format!("{at}.{problem}"));
                    None
                }
            };
            let machine = match &tool.workflow {
                None => None,
                Some(id) => match machines
                    .get(id)
                    .map(|(_, machine)| machine)
                    .or_else(|| self.workflows.get(id).map(|w| &w.machine))
                {
                    Some(machine) => Some(machine.clone()),
                    None => {
                        problems.push(format!("{at}: unknown workflow \"{id}\""));
                        continue;
                    }
                },
            };
            match &machine {
                Some(machine) => {
                    for state in &tool.states {
                        if !machine.has_state(state) {
                            problems.push(format!(
                                "{at}: workflow \"{}\" has no state \"{state}\"",
                                machine.id()
                            ));
                        }
                    }
                    if let Some(event) = &tool.transition
                        && !machine.accepts_event(event)
                    {
                        problems.push(format!(
                            "{at}: workflow \"{}\" has no transition on event \"{event}\"",
                            machine.id()
                        ));
                    }
                    if let Some(event) = &tool.on_error
                        && !machine.accepts_event(event)
                    {
                        problems.push(format!(
                            "{at}.on_error: workflow \"{}\" has no transition on event \"{event}\"",
                            machine.id()
                        ));
                    }
                    if let Some(event) = &tool.on_cancel
                        && !machine.accepts_event(event)
                    {
                        problems.push(format!(
                            "{at}.on_cancel: workflow \"{}\" has no transition on event \"{event}\"",
                            machine.id()
                        ));
                    }
                    if tool.on_cancel.is_some() && tool.task.is_none() {
                        problems.push(format!(
                            "{at}.on_cancel: only a tool that runs as a task (\"task\") is \
                             cancelled"
                        ));
                    }
                }
                None if !tool.states.is_empty()
                    || tool.transition.is_some()
                    || tool.on_error.is_some()
                    || tool.on_cancel.is_some() =>
                {
                    problems.push(format!(
                        "{at}: states, transition, on_error and on_cancel need a workflow"
                    ));
                }
                None => {}
            }
            if let Some(validator) = validator {
                tools.push((tool.clone(), validator, output_validator, confirm));
            }
        }
        let primitives = primitives::Primitives::check(
            self,
            plugin,
            |id| {
                machines
                    .get(id)
                    .map(|(_, machine)| machine)
                    .or_else(|| self.workflows.get(id).map(|w| &w.machine))
            },
            &mut problems,
        );
        if problems.is_empty() {
            Ok(Admitted {
                machines,
                tools,
                primitives,
            })
        } else {
            Err(problems)
        }
    }

    fn admit(&mut self, plugin: Arc<LoadedPlugin>, admitted: Admitted) {
        for (id, (definition, machine)) in admitted.machines {
            self.workflows.insert(
                id.clone(),
                Arc::new(Workflow {
                    id,
                    version: machine_version(&definition),
                    definition,
                    machine,
                    tools: Vec::new(),
                    archived: false,
                }),
            );
        }
        for (manifest, validator, output_validator, confirm) in admitted.tools {
            let entry = Arc::new(ToolEntry {
                manifest,
                plugin: plugin.clone(),
                validator,
                output_validator,
                confirm,
            });
            if let Some(workflow) = entry
                .manifest
                .workflow
                .as_ref()
                .and_then(|id| self.workflows.get_mut(id))
            {
                Arc::get_mut(workflow)
                    .expect("only the catalog holds its workflows while it is being built")
                    .tools
                    .push(entry.clone());
            }
            self.tools.insert(entry.manifest.name.clone(), entry);
        }
        self.primitives.admit(&plugin, admitted.primitives);
        self.plugins.push(plugin);
    }
}

/// What a checked plugin adds.
struct Admitted {
    /// Each machine with its definition.
    machines: BTreeMap<String, (Value, Arc<Machine>)>,
    /// Each tool with its compiled input and output schemas and confirmation.
    tools: Vec<(
        ToolManifest,
        jsonschema::Validator,
        Option<jsonschema::Validator>,
        Option<Confirmation>,
    )>,
    primitives: primitives::AdmittedPrimitives,
}

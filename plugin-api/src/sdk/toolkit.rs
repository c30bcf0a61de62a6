//! [`Toolkit`]: a plugin's workflows and tools, checked against each other and turned into a
//! [`Plugin`] that dispatches calls to the tools' handlers.
//!
//! [`Toolkit::build`] is where a declaration is checked: every bound state exists in its
//! machine, every event can be taken from the states the tool is visible in, names are unique
//! and valid, schemas are objects. It runs when the plugin is loaded (a failure refuses the
//! load with the list of problems) and in the plugin's unit tests, so a typo fails `cargo test`
//! rather than a deployment. The host checks the manifest again at load; this is the early copy
//! of those checks, plus the per-state event check the host does not make.

use std::{collections::HashMap, fmt, sync::Arc};

use serde_json::Value;

use super::{
    check::{check_prompt, check_resource, check_tool},
    prompt::{Completer, Prompt, Reader},
    resource::{Declared, Resource},
    tool::{Handler, Tool},
    workflow::Workflow,
};
use crate::{CallContext, Manifest, Plugin, PrimitiveKind, ToolError};

/// A plugin's declaration: name, version, workflows and tools. See the [module docs](super).
#[must_use = "a toolkit does nothing until `build` checks it"]
pub struct Toolkit {
    name: String,
    version: String,
    workflows: Vec<Workflow>,
    tools: Vec<Tool>,
    guards: Vec<(String, GuardHandler)>,
    prompts: Vec<Prompt>,
    resources: Vec<Resource>,
    isolate: bool,
}

/// A named guard's implementation: `(params, context, event) -> passes`.
type GuardHandler = Arc<dyn Fn(&Value, &Value, &Value) -> bool + Send + Sync>;

/// A checked [`Toolkit`]: a [`Plugin`] whose `call` runs the handler of the tool called, whose
/// `guard` decides its named guards, and whose `read` the renderer or reader of the prompt or
/// resource asked for.
pub struct ToolkitPlugin {
    manifest: Manifest,
    handlers: HashMap<String, Handler>,
    guards: HashMap<String, GuardHandler>,
    readers: HashMap<(PrimitiveKind, String), Reader>,
    /// Completions by (kind, prompt or template name, argument).
    completers: HashMap<(PrimitiveKind, String, String), Completer>,
}

/// What [`Toolkit::build`] found wrong, every problem at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclarationError {
    /// The plugin's name.
    pub plugin: String,
    /// One sentence per problem, each naming the tool or workflow it is about.
    pub problems: Vec<String>,
}

impl fmt::Display for DeclarationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plugin {} declares tools that do not fit its workflows: {}",
            self.plugin,
            self.problems.join("; ")
        )
    }
}

impl std::error::Error for DeclarationError {}

impl Toolkit {
    /// A toolkit with no tools yet. `version` is free-form; `env!("CARGO_PKG_VERSION")` is usual.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Toolkit {
        Toolkit {
            name: name.into(),
            version: version.into(),
            workflows: Vec::new(),
            tools: Vec::new(),
            guards: Vec::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            isolate: false,
        }
    }

    /// Implements the named guard `name`, which this toolkit's machines may name
    /// (`"guard": "name"` or `{"type": "name", "params": {...}}`): `decide(params, context,
    /// event)` says whether the transition may be taken. It must be pure and quick (the host
    /// calls it while deciding a transition, possibly more than once per event). Prefer the
    /// built-in `jsonLogic` guard where a rule over the context and event says it: the host can
    /// evaluate that one while listing tools, whereas a plugin's guard counts as possibly true
    /// until the call has run.
    pub fn guard(
        mut self,
        name: impl Into<String>,
        decide: impl Fn(&Value, &Value, &Value) -> bool + Send + Sync + 'static,
    ) -> Toolkit {
        self.guards.push((name.into(), Arc::new(decide)));
        self
    }

    /// Asks the host to run this plugin in a process of its own, so that a crash fails only
    /// the calls in flight (the manifest's `isolate`, see [`Manifest::isolate`]).
    pub fn isolated(mut self) -> Toolkit {
        self.isolate = true;
        self
    }

    /// Adds a workflow. Needed only for a workflow none of the tools belongs to: a tool brings
    /// its own workflow into the manifest.
    pub fn workflow(mut self, workflow: &Workflow) -> Toolkit {
        self.workflows.push(workflow.clone());
        self
    }

    /// Adds a tool (and its workflow, the first time one of its tools is added).
    pub fn tool(mut self, tool: Tool) -> Toolkit {
        self.bring(tool.workflow.as_ref());
        self.tools.push(tool);
        self
    }

    /// Adds a prompt (and its workflow, like [`Toolkit::tool`]).
    pub fn prompt(mut self, prompt: Prompt) -> Toolkit {
        self.bring(prompt.workflow.as_ref());
        self.prompts.push(prompt);
        self
    }

    /// Adds a resource or resource template (and its workflow, like [`Toolkit::tool`]).
    pub fn resource(mut self, resource: Resource) -> Toolkit {
        self.bring(resource.workflow.as_ref());
        self.resources.push(resource);
        self
    }

    /// Brings `workflow` into the manifest, once.
    fn bring(&mut self, workflow: Option<&Workflow>) {
        if let Some(workflow) = workflow
            && !self.workflows.iter().any(|known| known.same(workflow))
        {
            self.workflows.push(workflow.clone());
        }
    }

    /// Checks the declaration and builds the plugin. Checked: every bound state exists in its
    /// machine, every event does something in the states its tool is visible in (or, for a tool
    /// visible in every state, somewhere), tool names are valid and unique, descriptions are
    /// given, input and output types are JSON objects, and one id names one machine.
    pub fn build(self) -> Result<ToolkitPlugin, DeclarationError> {
        let mut problems = Vec::new();
        let mut manifest = Manifest::new(&self.name, &self.version);
        manifest.isolate = self.isolate;
        for (index, workflow) in self.workflows.iter().enumerate() {
            if let Err(problem) = workflow.parsed() {
                problems.push(format!("workflow #{}: {problem}", index + 1));
                continue;
            }
            let first = self.workflows.iter().position(|w| w.id() == workflow.id());
            match first {
                Some(first) if first < index => {
                    if self.workflows[first].machine() != workflow.machine() {
                        problems.push(format!(
                            "two different machines have the id \"{}\"",
                            workflow.id()
                        ));
                    }
                }
                _ => manifest.workflows.push(workflow.machine().clone()),
            }
        }
        let mut handlers = HashMap::with_capacity(self.tools.len());
        for tool in self.tools {
            problems.extend(check_tool(&tool));
            let name = tool.manifest.name.clone();
            if handlers.insert(name.clone(), tool.handler).is_some() {
                problems.push(format!("tool {name} is declared twice"));
            }
            manifest.tools.push(tool.manifest);
        }
        let mut guards = HashMap::with_capacity(self.guards.len());
        for (name, decide) in self.guards {
            if name.is_empty() || name.starts_with("xstate.") || name == "jsonLogic" {
                problems.push(format!("guard {name:?}: the name is empty or reserved"));
            }
            manifest.guards.push(name.clone());
            if guards.insert(name.clone(), decide).is_some() {
                problems.push(format!("guard {name} is declared twice"));
            }
        }
        let mut readers = HashMap::new();
        let mut completers = HashMap::new();
        for prompt in self.prompts {
            problems.extend(check_prompt(&prompt));
            let name = prompt.manifest.name.clone();
            if manifest.prompts.iter().any(|known| known.name == name) {
                problems.push(format!("prompt {name} is declared twice"));
            }
            for (argument, complete) in prompt.completers {
                if !prompt.manifest.arguments.iter().any(|a| a.name == argument) {
                    problems.push(format!(
                        "prompt {name} completes {argument:?}, not one of its arguments"
                    ));
                }
                completers.insert((PrimitiveKind::Prompt, name.clone(), argument), complete);
            }
            if let Some(reader) = prompt.reader {
                readers.insert((PrimitiveKind::Prompt, name), reader);
            }
            manifest.prompts.push(prompt.manifest);
        }
        let mut resource_names = Vec::new();
        let mut uris = Vec::new();
        for resource in self.resources {
            problems.extend(check_resource(&resource));
            let (name, uri) = (resource.declared.name(), resource.declared.uri());
            if resource_names.contains(&name.to_owned()) {
                problems.push(format!("resource name {name} is declared twice"));
            }
            if uris.contains(&uri.to_owned()) {
                problems.push(format!("resource {uri} is declared twice"));
            }
            resource_names.push(name.to_owned());
            uris.push(uri.to_owned());
            for (variable, complete) in resource.completers {
                if !uri.contains(&format!("{{{variable}}}")) {
                    problems.push(format!(
                        "resource {uri} completes {variable:?}, not one of its variables"
                    ));
                }
                completers.insert(
                    (PrimitiveKind::Resource, name.to_owned(), variable),
                    complete,
                );
            }
            if let Some(reader) = resource.reader {
                readers.insert((PrimitiveKind::Resource, name.to_owned()), reader);
            }
            match resource.declared {
                Declared::Fixed(fixed) => manifest.resources.push(fixed),
                Declared::Template(template) => manifest.resource_templates.push(template),
            }
        }
        // The host's own rules over the whole manifest, once each declaration passed the
        // SDK's: what is left for them to find is what the chains cannot say (a `quick` budget
        // out of range, say), in the host's words.
        if problems.is_empty()
            && let Err(problem) = manifest.check()
        {
            problems.push(problem);
        }
        if problems.is_empty() {
            Ok(ToolkitPlugin {
                manifest,
                handlers,
                guards,
                readers,
                completers,
            })
        } else {
            Err(DeclarationError {
                plugin: self.name,
                problems,
            })
        }
    }
}

impl fmt::Debug for ToolkitPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolkitPlugin")
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

impl ToolkitPlugin {
    /// The names of the tools, in declaration order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.manifest.tools.iter().map(|tool| tool.name.as_str())
    }
}

impl Plugin for ToolkitPlugin {
    fn manifest(&self) -> Manifest {
        self.manifest.clone()
    }

    fn call(&self, tool: &str, input: Value, ctx: &CallContext) -> Result<Value, ToolError> {
        let json = self.call_json(tool, input, ctx)?;
        serde_json::from_slice(&json).map_err(|error| {
            ToolError::failed(format!("{tool} produced output that is not JSON: {error}"))
        })
    }

    fn call_json(&self, tool: &str, input: Value, ctx: &CallContext) -> Result<Vec<u8>, ToolError> {
        match self.handlers.get(tool) {
            Some(handler) => handler(input, ctx),
            None => Err(ToolError::UnknownTool(tool.to_owned())),
        }
    }

    fn guard(
        &self,
        name: &str,
        params: &Value,
        context: &Value,
        event: &Value,
    ) -> Result<bool, ToolError> {
        match self.guards.get(name) {
            Some(decide) => Ok(decide(params, context, event)),
            None => Err(ToolError::failed(format!("no guard {name:?} is declared"))),
        }
    }

    fn read(
        &self,
        kind: PrimitiveKind,
        name: &str,
        request: Value,
        ctx: &CallContext,
    ) -> Result<Value, ToolError> {
        match self.readers.get(&(kind, name.to_owned())) {
            Some(reader) => reader(request, ctx),
            None => Err(ToolError::UnknownTool(name.to_owned())),
        }
    }

    fn complete(&self, name: &str, request: Value, ctx: &CallContext) -> Result<Value, ToolError> {
        let kind = match request["ref"].as_str() {
            Some("prompt") => PrimitiveKind::Prompt,
            Some("resource") => PrimitiveKind::Resource,
            _ => {
                return Err(ToolError::bad_input(
                    "ref must be \"prompt\" or \"resource\"",
                ));
            }
        };
        let argument = request["argument"]["name"].as_str().unwrap_or_default();
        let value = request["argument"]["value"].as_str().unwrap_or_default();
        match self
            .completers
            .get(&(kind, name.to_owned(), argument.to_owned()))
        {
            Some(complete) => Ok(serde_json::json!({ "values": complete(value, ctx) })),
            None => Err(ToolError::UnknownTool(name.to_owned())),
        }
    }
}

/// Exports a toolkit as the library's plugin: `export_toolkit!(toolkit)` with
/// `fn toolkit() -> Toolkit`. The toolkit is declared and checked when the host loads the
/// library (after [`plugin_config`](crate::plugin_config) is set, so the declaration may read
/// it); a [`DeclarationError`] refuses the load with its problems. Use it once per `cdylib`.
#[macro_export]
macro_rules! export_toolkit {
    ($declare:path) => {
        $crate::export_plugin!($crate::sdk::ToolkitPlugin, || {
            $crate::sdk::Toolkit::build($declare()).map_err(|error| error.to_string())
        });
    };
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sdk::{NoInput, action, prompt};

    fn door() -> Workflow {
        Workflow::new(json!({
            "id": "door", "initial": "closed",
            "states": {
                "closed": {"on": {"OPEN": "open", "LOCK": "locked"}},
                "open": {"on": {"CLOSE": "closed"}},
                "locked": {"on": {"UNLOCK": "closed"}}
            }
        }))
    }

    fn toolkit(state: &str, event: &str) -> Toolkit {
        let door = door();
        Toolkit::new("door", "1")
            .tool(
                door.action("door.open")
                    .describe("Opens the door.")
                    .bind_state(state, event)
                    .handle(|_: NoInput, ctx| Ok(json!({"door": ctx.handle}))),
            )
            .tool(
                door.action("door.status")
                    .describe("Where the door stands.")
                    .read_only()
                    .handle(|_: NoInput, ctx| Ok(json!({"was": ctx.state}))),
            )
            .tool(
                action("door.version")
                    .describe("The plugin's version.")
                    .handle(|_: NoInput, _| Ok("1")),
            )
    }

    #[test]
    fn a_toolkit_builds_the_manifest_and_dispatches_by_name() {
        let plugin = toolkit("closed", "OPEN").build().unwrap();
        let manifest = plugin.manifest();
        assert_eq!(manifest.workflows, [door().machine().clone()]);
        let open = &manifest.tools[0];
        assert_eq!(
            (
                open.workflow.as_deref(),
                open.states.as_slice(),
                open.transition.as_deref()
            ),
            (Some("door"), ["closed".to_owned()].as_slice(), Some("OPEN"))
        );
        assert_eq!(manifest.tools[1].workflow.as_deref(), Some("door"));
        assert!(manifest.tools[1].states.is_empty());
        assert_eq!(manifest.tools[2].workflow, None);
        let ctx = CallContext {
            handle: "h1".into(),
            ..CallContext::default()
        };
        assert_eq!(
            plugin.call("door.open", json!({}), &ctx),
            Ok(json!({"door": "h1"}))
        );
        assert_eq!(
            plugin.call("door.kick", json!({}), &ctx),
            Err(ToolError::UnknownTool("door.kick".into()))
        );
    }

    #[test]
    fn a_typo_in_a_state_or_an_event_fails_the_build() {
        let problems = |state, event| toolkit(state, event).build().err().unwrap().problems;
        assert_eq!(
            problems("closd", "OPEN"),
            ["tool door.open: workflow \"door\" has no state \"closd\""]
        );
        assert_eq!(
            problems("closed", "OPNE"),
            ["tool door.open: no state of workflow \"door\" takes event \"OPNE\""]
        );
        assert_eq!(
            problems("open", "OPEN"),
            ["tool door.open: event \"OPEN\" does nothing in state \"open\" of workflow \"door\""]
        );
    }

    #[test]
    fn duplicate_names_bad_machines_and_missing_descriptions_are_named() {
        let broken = Workflow::new(json!({"states": {}}));
        let error = Toolkit::new("p", "1")
            .tool(action("a").describe("A.").handle(|_: NoInput, _| Ok(1)))
            .tool(
                action("a")
                    .describe("A again.")
                    .handle(|_: NoInput, _| Ok(2)),
            )
            .tool(action("b c").handle(|_: NoInput, _| Ok(3)))
            .tool(
                broken
                    .action("d")
                    .describe("D.")
                    .handle(|_: String, _| Ok(4)),
            )
            .build()
            .unwrap_err();
        assert_eq!(
            error.problems,
            [
                "workflow #1: a workflow machine needs a string \"id\"",
                "tool a is declared twice",
                "tool name \"b c\" is not 1 to 128 characters of A-Z a-z 0-9 _ - .",
                "tool b c has no description (call .describe)",
                "tool d: its input type must be a struct (a JSON object), not {\"type\":\"string\"}",
            ]
        );
        assert!(error.to_string().starts_with("plugin p declares"));
    }

    /// The machine is read by the host's engine and the manifest checked by the host's rules,
    /// so what a host would refuse at load fails the build, in the host's words.
    #[test]
    fn what_the_host_would_refuse_fails_the_build() {
        let typo = Workflow::new(json!({"id": "door", "intial": "closed", "states": {}}));
        let problems = Toolkit::new("p", "1")
            .workflow(&typo)
            .build()
            .unwrap_err()
            .problems;
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("workflow #1: ") && problems[0].contains("intial"),
            "{problems:?}"
        );
        let slow = Toolkit::new("p", "1").tool(
            action("p.slow")
                .describe("Slow.")
                .quick(500)
                .handle(|_: NoInput, _| Ok(1)),
        );
        assert_eq!(
            slow.build().unwrap_err().problems,
            [
                "tools[0] (p.slow): quick_ms must be 1 to 20 (milliseconds), not 500; a slower \
              tool leaves quick_ms out and runs on worker threads"
            ]
        );
    }

    #[test]
    fn prompts_and_resources_are_checked_and_dispatched_by_kind_and_name() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Count {
            count: u32,
        }
        let door = door();
        let plugin = Toolkit::new("door", "1")
            .prompt(
                door.prompt("door.safety")
                    .describe("Safety.")
                    .visible_in(["open"])
                    .render(|_: NoInput, ctx| Ok(format!("{} is open", ctx.handle))),
            )
            .resource(
                door.resource("door://{handle}", "door")
                    .visible_in(["open", "locked"])
                    .read(|request, _| Ok(request.uri)),
            )
            .resource(crate::sdk::resource("door://manual", "manual").text("Push."))
            .build()
            .unwrap();
        let manifest = plugin.manifest();
        assert_eq!(
            manifest.workflows.len(),
            1,
            "the prompt brought its workflow"
        );
        assert_eq!(manifest.prompts[0].states, ["open"]);
        assert_eq!(
            manifest.resource_templates[0].uri_template,
            "door://{handle}"
        );
        assert_eq!(manifest.resources[0].text.as_deref(), Some("Push."));
        let ctx = CallContext {
            handle: "h1".into(),
            ..CallContext::default()
        };
        assert_eq!(
            plugin.read(PrimitiveKind::Prompt, "door.safety", json!({}), &ctx),
            Ok(json!("h1 is open"))
        );
        let request = json!({"uri": "door://h1", "variables": {"handle": "h1"}});
        assert_eq!(
            plugin.read(PrimitiveKind::Resource, "door", request.clone(), &ctx),
            Ok(json!("door://h1"))
        );
        assert_eq!(
            plugin.read(PrimitiveKind::Prompt, "door", request, &ctx),
            Err(ToolError::UnknownTool("door".into())),
            "a resource's name is not a prompt's"
        );

        let problems = Toolkit::new("door", "1")
            .prompt(
                door.prompt("door.safety")
                    .describe("S.")
                    .visible_in(["opne"])
                    .text("t"),
            )
            .prompt(door.prompt("door.safety").describe("S again.").text("t"))
            .prompt(prompt("door count").render(|_: Count, _| Ok("n")))
            .resource(crate::sdk::resource("x://{handle}", "x").read(|_, _| Ok("")))
            .resource(door.resource("y://{y}", "y").text("t"))
            .build()
            .unwrap_err()
            .problems;
        assert_eq!(
            problems,
            [
                "prompt door.safety: workflow \"door\" has no state \"opne\"",
                "prompt door.safety is declared twice",
                "prompt name \"door count\" is not 1 to 128 characters of A-Z a-z 0-9 _ - .",
                "prompt door count has no description (call .describe)",
                "prompt door count: prompt arguments are strings, but count is not",
                "resource x://{handle} names an instance ({handle}), so it needs a workflow \
                 (start it with Workflow::resource)",
                "resource y://{y} is a template (it has a {variable}): give it a reader \
                 (.read), not .text",
            ]
        );
    }
}

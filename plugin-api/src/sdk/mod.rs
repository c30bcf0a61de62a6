//! The typed Rust SDK: declare a workflow once, each tool in one chain, and let the SDK write the
//! manifest and dispatch the calls.
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//! use turnstile_plugin::sdk::{NoInput, Toolkit, Workflow};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Lock {
//!     /// Who locks the door (for the log).
//!     by: String,
//! }
//!
//! pub fn toolkit() -> Toolkit {
//!     let door = Workflow::new(json!({"id": "door", "initial": "closed", "states": {
//!         "closed": {"on": {"OPEN": "open", "LOCK": "locked"}},
//!         "open": {"on": {"CLOSE": "closed"}},
//!         "locked": {"on": {"UNLOCK": "closed"}}}}));
//!     Toolkit::new("door", env!("CARGO_PKG_VERSION"))
//!         .tool(door.action("door.open")
//!             .describe("Opens the closed door.")
//!             .bind_state("closed", "OPEN")
//!             .handle(|_: NoInput, ctx| Ok(json!({"door": ctx.handle, "message": "Opened."}))))
//!         .tool(door.action("door.lock")
//!             .describe("Locks the closed door; give your name.")
//!             .compact("Lock the door.")
//!             .bind_state("closed", "LOCK")
//!             .handle(|input: Lock, _ctx| Ok(json!({"message": format!("Locked by {}.", input.by)}))))
//! }
//!
//! turnstile_plugin::export_toolkit!(toolkit);
//!
//! // In the plugin's tests: a typo in a state or an event fails here.
//! # fn main() {
//! toolkit().build().unwrap();
//! # }
//! ```
//!
//! # What each piece does
//!
//! - [`Workflow::new`] takes the machine as XState v5 JSON (paste it from Stately). Its `id` is
//!   the workflow's name; tools started with [`Workflow::action`] are bound to it without
//!   naming it again. [`action`] starts a tool bound to no workflow.
//! - The chain: [`describe`](ToolBuilder::describe) (the full description),
//!   [`compact`](ToolBuilder::compact) (the short one shown in the machine's initial state),
//!   [`bind_state(state, event)`](ToolBuilder::bind_state) (visible in `state`, fires `event`
//!   after a successful call; call it again to add states), [`visible_in`](ToolBuilder::visible_in)
//!   and [`fires`](ToolBuilder::fires) for the other combinations, [`title`](ToolBuilder::title),
//!   [`annotations`](ToolBuilder::annotations) or [`read_only`](ToolBuilder::read_only), and
//!   [`output::<O>()`](ToolBuilder::output) to declare the output type.
//! - [`handle`](ToolBuilder::handle) ends the chain. The handler's argument type gives the
//!   tool's input schema (derive `serde::Deserialize` and `schemars::JsonSchema`; doc comments
//!   become the properties' descriptions; `Option` fields are optional; [`NoInput`] for none).
//!   Arguments that do not deserialise never reach the handler: the call fails with `BAD_INPUT`
//!   naming where (``invalid input at `lines[1].quantity`: …``). Do not deny unknown fields: the
//!   host may add arguments of its own. The handler returns any `Serialize` value (or the
//!   declared output type) or a [`ToolError`](crate::ToolError); the crate docs' output
//!   convention applies (`_content` for content blocks).
//! - The handler gets the [`CallContext`](crate::CallContext): the instance's `handle`, the
//!   `state` it is in *before* the call, a `call_id`, and `host` services (log to the client,
//!   report progress, poll for cancellation). The plugin's configuration is
//!   [`plugin_config`](crate::plugin_config).
//! - The handler never names the state that comes next: after a successful call the host fires
//!   the tool's event, saves the new state, and adds it to the result's `structuredContent` as
//!   `"state"` (unless the output has a `state` of its own).
//! - [`Toolkit::build`] checks the declaration: the machine is one the host loads (it is read by
//!   the host's own engine, `turnstile-statechart`), every bound state exists in it, every
//!   event is taken by some state the tool is visible in, tool names are valid and unique, input
//!   and output types are objects, and the manifest passes the host's rules
//!   ([`Manifest::check`](crate::Manifest::check)). [`export_toolkit!`](crate::export_toolkit)
//!   runs it when the host loads the library (a problem refuses the load); a unit test that
//!   calls it catches a typo before that. Give every plugin such a test
//!   ([`testing::built`](crate::testing::built)).
//!
//! # Prompts and resources
//!
//! Prompts and resources are declared the same way and gated the same way: the host offers one
//! only while the client's instance is in one of its states, so an agent is shown the
//! instructions and documents that fit the step it is at.
//!
//! ```
//! # use serde::Deserialize;
//! # use schemars::JsonSchema;
//! # use serde_json::json;
//! # use turnstile_plugin::sdk::{Toolkit, Workflow};
//! #[derive(Deserialize, JsonSchema)]
//! struct Focus {
//!     /// What to look at first.
//!     focus: Option<String>,
//! }
//!
//! # fn toolkit() -> Toolkit {
//! let door = Workflow::new(json!({"id": "door", "initial": "closed", "states": {
//!     "closed": {"on": {"OPEN": "open"}}, "open": {"on": {"CLOSE": "closed"}}}}));
//! Toolkit::new("door", "1")
//!     .prompt(door.prompt("door.safety")
//!         .describe("What to check before closing an open door.")
//!         .visible_in(["open"])
//!         .render(|args: Focus, ctx| Ok(format!("The door {} is open. Check {}.",
//!             ctx.handle, args.focus.as_deref().unwrap_or("the hinges")))))
//!     .resource(door.resource("door://{handle}", "door")
//!         .describe("The door, as it stands.")
//!         .mime_type("application/json")
//!         .read(|_request, ctx| Ok(json!({"state": ctx.state}))))
//! # }
//! # fn main() { toolkit().build().unwrap(); }
//! ```
//!
//! - [`Workflow::prompt`] / [`prompt`] start a prompt; [`visible_in`](PromptBuilder::visible_in)
//!   binds it; [`render`](PromptBuilder::render) finishes it with a renderer whose argument
//!   type gives the prompt's arguments (strings), or [`text`](PromptBuilder::text) with fixed
//!   text.
//! - [`Workflow::resource`] / [`resource`] start a resource; a URI with a `{variable}` makes it
//!   a template, and `{handle}` names the instance itself (one resource per instance, readable
//!   only by whoever holds the handle). [`read`](ResourceBuilder::read) finishes it with a
//!   reader, or [`text`](ResourceBuilder::text) (fixed URIs only).
//! - Renderers and readers get the [`CallContext`](crate::CallContext) of the instance: its
//!   `state`, and its machine `context` (what earlier calls assigned).
//!
//! Handlers run on several threads at once (`Send + Sync`). Keep what an instance needs in its
//! arguments and its workflow state, not in the plugin's memory: the host may run several
//! processes against one store, and restarts.
//!
//! # Layout
//!
//! - [`workflow`](Workflow): the machine and the start of its tools.
//! - [`ToolBuilder`], [`Tool`], [`NoInput`]: one tool's chain (`tool.rs`).
//! - [`PromptBuilder`], [`Prompt`]: one prompt's chain (`prompt.rs`).
//! - [`ResourceBuilder`], [`Resource`], [`ResourceRequest`]: one resource's chain
//!   (`resource.rs`).
//! - [`Toolkit`], [`ToolkitPlugin`], [`DeclarationError`]: checking and dispatch (`toolkit.rs`).
//! - `check.rs`: what `Toolkit::build` checks of each tool, prompt and resource.
//! - `schema.rs`: schemas derived with `schemars`, cleaned into plain object schemas.

mod check;
mod prompt;
mod resource;
mod schema;
mod tool;
mod toolkit;
mod workflow;

pub use self::{
    prompt::{Prompt, PromptBuilder, prompt},
    resource::{Resource, ResourceBuilder, ResourceRequest, resource},
    tool::{NoInput, Tool, ToolBuilder, Typed, Untyped, action},
    toolkit::{DeclarationError, Toolkit, ToolkitPlugin},
    workflow::Workflow,
};

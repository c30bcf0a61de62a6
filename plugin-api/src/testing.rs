//! What a plugin's own unit tests share: the plugin built as the host will load it, the context
//! of a call in a given state, and a manifest's bindings in one line each. The example plugins
//! (`plugins/invoice`, `plugins/payment`) and the crate `turnstile new-plugin` writes use it.
//!
//! Plain functions over the SDK's types, no test framework and no I/O, so it is a public module
//! rather than one behind a feature: a plugin calls it from its `#[cfg(test)]` code, and the
//! linker leaves it out of the library. It must not imitate the host (no gate, no transitions,
//! no schema checks of the arguments): a plugin's unit test checks its declaration and its
//! handlers; what the host does with them is tested end to end, against the real server.

use serde_json::json;

use crate::{
    CallContext, Manifest,
    sdk::{Toolkit, ToolkitPlugin},
};

/// The call id of every context [`context`] makes.
pub const CALL_ID: &str = "c1";

/// `toolkit` built, as the host builds it when it loads the library; panics naming every
/// problem when the declaration does not fit its machines (a state or event misspelt).
pub fn built(toolkit: Toolkit) -> ToolkitPlugin {
    toolkit.build().unwrap_or_else(|error| panic!("{error}"))
}

/// The context of a call on the instance `handle` while it is in `state` (a state name; the
/// host passes the state value, which for a flat machine is the name): call id [`CALL_ID`],
/// no machine context, no host services, nothing asked. Set the other fields with struct
/// update syntax: `CallContext { context: json!({...}), ..context("h1", "review") }`.
pub fn context(handle: &str, state: &str) -> CallContext {
    CallContext {
        call_id: CALL_ID.to_owned(),
        handle: handle.to_owned(),
        state: json!(state),
        ..CallContext::default()
    }
}

/// Each tool of `manifest` with its binding, in the manifest's order: its name, its states
/// joined by `,` (empty when it is visible in every state), and the event it fires.
pub fn bindings(manifest: &Manifest) -> Vec<(&str, String, Option<&str>)> {
    manifest
        .tools
        .iter()
        .map(|tool| {
            (
                tool.name.as_str(),
                tool.states.join(","),
                tool.transition.as_deref(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::{NoInput, Workflow};

    #[test]
    fn a_toolkit_is_built_and_its_bindings_listed() {
        let door = Workflow::new(json!({"id": "door", "initial": "closed", "states": {
            "closed": {"on": {"OPEN": "open"}}, "open": {}}}));
        let plugin = built(
            Toolkit::new("door", "1").tool(
                door.action("door.open")
                    .describe("Opens the door.")
                    .bind_state("closed", "OPEN")
                    .handle(|_: NoInput, ctx| Ok(json!({"door": ctx.handle, "call": ctx.call_id}))),
            ),
        );
        let manifest = crate::Plugin::manifest(&plugin);
        assert_eq!(
            bindings(&manifest),
            [("door.open", "closed".to_owned(), Some("OPEN"))]
        );
        let ctx = context("h1", "closed");
        assert_eq!(ctx.state, json!("closed"));
        assert_eq!(
            crate::Plugin::call(&plugin, "door.open", json!({}), &ctx),
            Ok(json!({"door": "h1", "call": CALL_ID}))
        );
    }

    #[test]
    #[should_panic(expected = "has no state \"closd\"")]
    fn a_declaration_that_does_not_fit_panics_naming_the_problem() {
        let door = Workflow::new(json!({"id": "door", "initial": "closed", "states": {
            "closed": {"on": {"OPEN": "closed"}}}}));
        built(
            Toolkit::new("door", "1").tool(
                door.action("door.open")
                    .describe("Opens the door.")
                    .bind_state("closd", "OPEN")
                    .handle(|_: NoInput, _| Ok(1)),
            ),
        );
    }
}

//! The default load: each client walks the workflow the way an agent would. It lists the tools,
//! chooses one of them, calls it with arguments made from its input schema, lists again after a
//! success (a changed menu is a transition, whose `list_changed` it waits for), and goes on until
//! the workflow is done (nothing left but read-only tools) or the step limit. Now and then it
//! probes a tool listed earlier in the walk but not now, which must be refused.
//!
//! Knows nothing of any particular server: only menus, schemas and outcomes.

use std::{collections::BTreeMap, sync::Arc};

use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::Value;
use tokio::task::JoinSet;

use super::{
    Shared,
    contract::CallIntent,
    conversation::Conversation,
    schema_args,
    tools::{Menu, Outcome, ToolInfo, menus_differ},
};

/// How often an agent calls a read-only tool (a status check) although others are listed.
const READ_ONLY_SHARE: f64 = 0.1;

/// One client: walks until the run stops or it has done `--iterations` walks.
pub async fn run_client(shared: Arc<Shared>) {
    let mut rng = StdRng::from_rng(&mut rand::rng());
    let mut conversation: Option<Conversation> = None;
    // Sessions that ended are judged in the background, so the next walk need not wait.
    let mut ending = JoinSet::new();
    let mut walks = 0u64;
    while !shared.should_stop(walks) {
        let current = match conversation.take() {
            Some(current) => current,
            None => match Conversation::open(&shared).await {
                Ok(opened) => opened,
                Err(error) => {
                    shared.stats.error(error.kind());
                    shared.back_off().await;
                    continue;
                }
            },
        };
        let mut current = current;
        walk(&mut current, &shared, &mut rng).await;
        walks += 1;
        shared.stats.iteration();
        // A finished instance in session mode is the session's own: a new walk needs a new
        // session. In handle mode the session may stay and mint a new instance (unless --churn).
        if shared.settings.churn || shared.settings.handle_key.is_none() {
            ending.spawn(current.finish());
        } else {
            current.handle = None;
            conversation = Some(current);
        }
    }
    shared.client_done();
    if let Some(current) = conversation {
        ending.spawn(current.finish());
    }
    ending.join_all().await;
}

/// One walk through one instance.
async fn walk(conversation: &mut Conversation, shared: &Shared, rng: &mut StdRng) {
    let Some(mut menu) = conversation.list().await else {
        return;
    };
    // Every tool listed at some point of this walk: the ones not listed now are probes.
    let mut seen: BTreeMap<String, ToolInfo> = BTreeMap::new();
    remember(&mut seen, &menu);
    let handle_key = shared.settings.handle_key.as_deref();
    for _ in 0..shared.settings.step_limit {
        if shared.is_stopped() {
            return;
        }
        let unlisted: Vec<&ToolInfo> = seen
            .values()
            .filter(|tool| !menu.iter().any(|listed| listed.name == tool.name))
            .collect();
        let probing = !unlisted.is_empty() && rng.random_bool(shared.settings.probe_rate);
        let (tool, intent) = if probing {
            (
                unlisted[rng.random_range(0..unlisted.len())].clone(),
                CallIntent::Unlisted,
            )
        } else {
            let Some(tool) = choose(&menu, rng) else {
                return; // Done: nothing but read-only tools, or nothing at all.
            };
            (tool.clone(), CallIntent::Listed)
        };
        // Probes get valid arguments, so that a refusal can only be about the state.
        let wants_invalid = !probing && rng.random_bool(shared.settings.invalid_rate);
        let invalid = if wants_invalid {
            schema_args::invalid(&tool.input_schema, handle_key, rng)
        } else {
            None
        };
        let valid = invalid.is_none();
        let arguments: Value =
            invalid.unwrap_or_else(|| schema_args::valid(&tool.input_schema, handle_key, rng));
        let Some((outcome, due)) = conversation
            .call(&tool.name, arguments, intent, valid)
            .await
        else {
            return;
        };
        if !matches!(outcome, Outcome::Ok { .. }) {
            continue;
        }
        let Some(after) = conversation.list().await else {
            return;
        };
        if menus_differ(&menu, &after) {
            let counted = shared.stats.transition();
            conversation.subscribed_transition(Some(due), counted).await;
        }
        remember(&mut seen, &after);
        menu = after;
    }
}

/// The tool an agent calls next: one that may move the workflow on, mostly; `None` when only
/// read-only tools are left.
fn choose<'m>(menu: &'m Menu, rng: &mut StdRng) -> Option<&'m ToolInfo> {
    let movers: Vec<&ToolInfo> = menu.iter().filter(|tool| !tool.read_only).collect();
    if movers.is_empty() {
        return None;
    }
    if rng.random_bool(READ_ONLY_SHARE) {
        return Some(&menu[rng.random_range(0..menu.len())]);
    }
    Some(movers[rng.random_range(0..movers.len())])
}

fn remember(seen: &mut BTreeMap<String, ToolInfo>, menu: &Menu) {
    for tool in menu {
        seen.entry(tool.name.clone())
            .or_insert_with(|| tool.clone());
    }
}

//! The next step in every result of a workflow tool: where the instance is now and which tools
//! may follow, as one closing text block a model reads and as `_meta` a client can act on.
//!
//! The tool list is not how most models learn the order: many 2025 clients never re-read it after
//! `list_changed`, and a 2026-07-28 list does not follow the instance at all. The result of the
//! call the model just made is the one thing every client shows it.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::gate::NextStep;

/// The `_meta` key of a workflow tool's result that carries its next step (Turnstile's vendor
/// prefix, SEP-2133 naming; the same prefix as the gated-lists extension).
pub const NEXT_STEP_META_KEY: &str = "dev.turnstile/next-step";

/// Where a result's next step is written (`--next-step`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NextStepMode {
    /// A closing text block and `_meta`.
    #[default]
    Both,
    /// Only the closing text block.
    Text,
    /// Only `_meta`: the model reads nothing added.
    Meta,
    /// Neither: results are the plugin's alone (and the handle's line, when one is minted).
    Off,
}

impl NextStepMode {
    /// Whether the closing text block is written.
    pub fn writes_text(self) -> bool {
        matches!(self, NextStepMode::Both | NextStepMode::Text)
    }

    fn writes_meta(self) -> bool {
        matches!(self, NextStepMode::Both | NextStepMode::Meta)
    }
}

/// One instance's next step, as a result reports it.
pub struct Whereabouts<'a> {
    pub workflow: &'a str,
    /// In handle mode: the instance's handle (the model passes it to the next call).
    pub handle: Option<&'a str>,
    pub next: NextStep,
    /// Whether this call moved the instance.
    pub moved: bool,
}

/// Adds `at` to `result` as `mode` says: `_meta` under [`NEXT_STEP_META_KEY`] and one last text
/// block. `structuredContent` is left alone, so it still matches the tool's `outputSchema`.
/// Every call of a workflow tool comes here: the sentence is written first, while `at` is
/// whole, and the `_meta` object takes `at`'s values without copying them.
pub fn with_next_step(
    mut result: CallToolResult,
    mode: NextStepMode,
    at: Whereabouts<'_>,
) -> CallToolResult {
    if mode.writes_text() {
        result.content.push(ContentBlock::text(sentence(&at)));
    }
    if mode.writes_meta() {
        let mut next = serde_json::Map::with_capacity(6);
        next.insert("workflow".to_string(), Value::from(at.workflow));
        if let Some(handle) = at.handle {
            next.insert("handle".to_string(), Value::from(handle));
        }
        let status = if at.next.done { "done" } else { "active" };
        next.insert("state".to_string(), at.next.state);
        next.insert("status".to_string(), Value::from(status));
        let available = at.next.available.into_iter().map(Value::String).collect();
        next.insert("available".to_string(), Value::Array(available));
        next.insert("moved".to_string(), Value::Bool(at.moved));
        if let Some(running) = at.next.running {
            let running = serde_json::json!({"taskId": running.task_id, "tool": running.tool});
            next.insert("runningTask".to_string(), running);
        }
        result
            .meta
            .get_or_insert_default()
            .insert(NEXT_STEP_META_KEY.to_string(), Value::Object(next));
    }
    result
}

/// Where an instance stands when a result cannot say it for sure: what an error reports in
/// place of a [`Whereabouts`].
pub enum Uncertain {
    /// The call's save got no answer the store could settle: the instance is in `before`, or
    /// where the call would have moved it. `readers` are the tools that say which.
    MayHaveMoved {
        before: NextStep,
        readers: Vec<String>,
    },
    /// Where the instance stands could not be read (its record did not load).
    Unread,
    /// The call started no instance: `starters` are the tools that start one.
    NotStarted { starters: Vec<String> },
}

/// Adds `uncertain` to `result` as `mode` says, as [`with_next_step`] adds a known step: a
/// closing sentence, and `_meta` with `status` `"unknown"` (and `moved` `"unknown"` when the
/// call may have moved the instance) or `"not-started"`, `state` null where it is not known.
pub fn with_uncertain_step(
    mut result: CallToolResult,
    mode: NextStepMode,
    workflow: &str,
    handle: Option<&str>,
    uncertain: Uncertain,
) -> CallToolResult {
    if mode.writes_text() {
        let text = uncertain_sentence(workflow, handle, &uncertain);
        result.content.push(ContentBlock::text(text));
    }
    if mode.writes_meta() {
        let mut next = serde_json::Map::with_capacity(7);
        next.insert("workflow".to_string(), Value::from(workflow));
        if let Some(handle) = handle {
            next.insert("handle".to_string(), Value::from(handle));
        }
        let names =
            |names: Vec<String>| Value::Array(names.into_iter().map(Value::String).collect());
        match uncertain {
            Uncertain::MayHaveMoved { before, readers } => {
                next.insert("state".to_string(), before.state);
                next.insert("status".to_string(), Value::from("unknown"));
                next.insert("available".to_string(), names(before.available));
                next.insert("moved".to_string(), Value::from("unknown"));
                next.insert("readers".to_string(), names(readers));
            }
            Uncertain::Unread => {
                next.insert("state".to_string(), Value::Null);
                next.insert("status".to_string(), Value::from("unknown"));
                next.insert("available".to_string(), Value::Array(Vec::new()));
                next.insert("moved".to_string(), Value::Bool(false));
            }
            Uncertain::NotStarted { starters } => {
                next.insert("state".to_string(), Value::Null);
                next.insert("status".to_string(), Value::from("not-started"));
                next.insert("available".to_string(), names(starters));
                next.insert("moved".to_string(), Value::Bool(false));
            }
        }
        result
            .meta
            .get_or_insert_default()
            .insert(NEXT_STEP_META_KEY.to_string(), Value::Object(next));
    }
    result
}

/// "Invoice invoice-… may have moved: …", "No invoice was started. …".
fn uncertain_sentence(workflow: &str, handle: Option<&str>, uncertain: &Uncertain) -> String {
    let mut named = capitalized(workflow);
    if let Some(handle) = handle {
        named.push(' ');
        named.push_str(handle);
    }
    match uncertain {
        Uncertain::MayHaveMoved { before, readers } => {
            let read = if readers.is_empty() {
                "read it again".to_owned()
            } else {
                format!("call {}", readers.join(" or "))
            };
            format!(
                "{named} may have moved: before this call it was in {state}. To learn where it \
                 is, {read}, or retry with the same idempotency key.",
                state = state_label(&before.state),
            )
        }
        Uncertain::Unread => format!(
            "{named}: where it stands could not be read just now; call again once the store \
             answers."
        ),
        Uncertain::NotStarted { starters } if starters.is_empty() => {
            format!("No {workflow} was started.")
        }
        Uncertain::NotStarted { starters } => format!(
            "No {workflow} was started. To start one, call {}.",
            starters.join(" or ")
        ),
    }
}

/// `workflow` with its first letter in upper case.
fn capitalized(workflow: &str) -> String {
    let mut text = String::with_capacity(workflow.len() + 64);
    let mut letters = workflow.chars();
    if let Some(first) = letters.next() {
        text.extend(first.to_uppercase());
        text.push_str(letters.as_str());
    }
    text
}

/// "Invoice invoice-… is now in approved. Next: invoice.discharge, invoice.status."
fn sentence(at: &Whereabouts<'_>) -> String {
    let mut text = String::with_capacity(96);
    let mut letters = at.workflow.chars();
    if let Some(first) = letters.next() {
        text.extend(first.to_uppercase());
        text.push_str(letters.as_str());
    }
    if let Some(handle) = at.handle {
        text.push(' ');
        text.push_str(handle);
    }
    text.push_str(if at.moved { " is now in " } else { " is in " });
    text.push_str(&state_label(&at.next.state));
    if let Some(running) = &at.next.running {
        text.push_str(". ");
        text.push_str(&running.tool);
        text.push_str(" is running on it as task ");
        text.push_str(&running.task_id);
        text.push_str(
            ", which holds it until it ends: follow the task (tasks/get), and only tools that \
             read are served meanwhile",
        );
    }
    if at.next.done {
        text.push_str(", a final state: there is no next step.");
    } else if at.next.available.is_empty() {
        text.push_str(". Next: no tool until the workflow moves on by itself.");
    } else {
        text.push_str(". Next: ");
        for (i, tool) in at.next.available.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str(tool);
        }
        text.push('.');
    }
    text
}

/// An XState state value as a model reads it: `review`, `review.pending` for one nested state,
/// the JSON value for parallel regions.
pub fn state_label(state: &Value) -> String {
    if let Value::String(leaf) = state {
        return leaf.clone();
    }
    let mut path = Vec::new();
    let mut at = state;
    loop {
        match at {
            Value::String(leaf) => {
                path.push(leaf.as_str());
                return path.join(".");
            }
            Value::Object(one) if one.len() == 1 => {
                let (name, inner) = one.iter().next().expect("one entry");
                if inner.as_object().is_some_and(|inner| inner.is_empty()) {
                    path.push(name);
                    return path.join(".");
                }
                path.push(name);
                at = inner;
            }
            _ => return serde_json::to_string(state).expect("a JSON value always serializes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn step(state: Value, done: bool, available: &[&str]) -> NextStep {
        NextStep {
            state,
            done,
            available: available.iter().map(|name| name.to_string()).collect(),
            running: None,
        }
    }

    #[test]
    fn a_step_running_as_a_task_is_said_and_carried() {
        let mut next = step(json!("backed_up"), false, &["migration.status"]);
        next.running = Some(crate::gate::RunningStep {
            task_id: "t1.migration-1".into(),
            tool: "migration.apply".into(),
        });
        let at = Whereabouts {
            workflow: "migration",
            handle: Some("migration-1"),
            next,
            moved: false,
        };
        let result = with_next_step(CallToolResult::success(vec![]), NextStepMode::Both, at);
        let said = texts(&result).pop().unwrap();
        assert!(
            said.contains("migration.apply is running on it as task t1.migration-1")
                && said.ends_with("Next: migration.status."),
            "{said}"
        );
        let meta = &result.meta.unwrap()[NEXT_STEP_META_KEY];
        assert_eq!(
            meta["runningTask"],
            json!({"taskId": "t1.migration-1", "tool": "migration.apply"})
        );
    }

    fn texts(result: &CallToolResult) -> Vec<String> {
        result
            .content
            .iter()
            .filter_map(|block| block.as_text().map(|text| text.text.clone()))
            .collect()
    }

    #[test]
    fn the_next_step_closes_the_result_in_text_and_meta() {
        let next = step(
            json!("approved"),
            false,
            &["invoice.discharge", "invoice.status"],
        );
        let at = Whereabouts {
            workflow: "invoice",
            handle: Some("invoice-abc"),
            next: next.clone(),
            moved: true,
        };
        let plugin = CallToolResult::success(vec![ContentBlock::text("{\"ok\":true}")]);
        let result = with_next_step(plugin, NextStepMode::Both, at);
        assert_eq!(
            texts(&result),
            [
                "{\"ok\":true}",
                "Invoice invoice-abc is now in approved. Next: invoice.discharge, invoice.status."
            ]
        );
        assert_eq!(
            result.meta.unwrap().get(NEXT_STEP_META_KEY).unwrap(),
            &json!({
                "workflow": "invoice",
                "handle": "invoice-abc",
                "state": "approved",
                "status": "active",
                "available": ["invoice.discharge", "invoice.status"],
                "moved": true,
            })
        );
    }

    #[test]
    fn each_mode_writes_only_its_channels() {
        let next = step(json!("draft"), false, &["invoice.submit"]);
        let at = || Whereabouts {
            workflow: "invoice",
            handle: None,
            next: next.clone(),
            moved: false,
        };
        let base = || CallToolResult::success(vec![ContentBlock::text("x")]);
        let text_only = with_next_step(base(), NextStepMode::Text, at());
        assert!(text_only.meta.is_none());
        assert_eq!(
            texts(&text_only)[1],
            "Invoice is in draft. Next: invoice.submit."
        );
        let meta_only = with_next_step(base(), NextStepMode::Meta, at());
        assert_eq!(texts(&meta_only), ["x"]);
        assert!(meta_only.meta.unwrap().get(NEXT_STEP_META_KEY).is_some());
        let off = with_next_step(base(), NextStepMode::Off, at());
        assert_eq!(texts(&off), ["x"]);
        assert!(off.meta.is_none());
    }

    #[test]
    fn a_final_state_says_so_and_lists_nothing() {
        let next = step(json!("discharged"), true, &[]);
        let at = Whereabouts {
            workflow: "invoice",
            handle: Some("invoice-abc"),
            next: next.clone(),
            moved: true,
        };
        let result = with_next_step(CallToolResult::success(vec![]), NextStepMode::Both, at);
        assert_eq!(
            texts(&result),
            ["Invoice invoice-abc is now in discharged, a final state: there is no next step."]
        );
        let meta = result.meta.unwrap();
        assert_eq!(meta.get(NEXT_STEP_META_KEY).unwrap()["status"], "done");
        assert_eq!(
            meta.get(NEXT_STEP_META_KEY).unwrap()["available"],
            json!([])
        );
    }

    #[test]
    fn state_values_read_as_paths_where_they_are_one() {
        assert_eq!(state_label(&json!("review")), "review");
        assert_eq!(state_label(&json!({"review": "pending"})), "review.pending");
        assert_eq!(state_label(&json!({"a": {"b": "c"}})), "a.b.c");
        assert_eq!(state_label(&json!({"a": {}})), "a");
        assert_eq!(
            state_label(&json!({"left": "x", "right": "y"})),
            r#"{"left":"x","right":"y"}"#
        );
    }
}

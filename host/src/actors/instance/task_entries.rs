//! An instance's tasks as its record keeps them (`store::TaskEntry`): which entries a save keeps,
//! and how a task's end is written into its entry. Pure: no actor, no store. The running of a
//! task is `task.rs`'s; a call's save writes its task's end through here (`run_call.rs`).

use serde_json::{Value, json};

use crate::actors::idempotency;
use crate::plugin::PluginOutput;
use crate::store::{TaskEntry, TaskEntryStatus};

use super::InstanceView;

/// What the audit trail's line of a cancelled task says made it (`by`), before the task's tool.
pub const CANCELLED_BY: &str = "tasks/cancel:";

/// Most tasks kept per instance, the running one included: the newest.
pub const MAX_KEPT: usize = 8;

/// The tasks `entries` keeps with `entry` added: the newest [`MAX_KEPT`], without those ended
/// past their `ttl`.
pub(super) fn with_entry(entries: &[TaskEntry], entry: TaskEntry, now: u64) -> Vec<TaskEntry> {
    let id = entry.id.clone();
    let mut kept: Vec<TaskEntry> = entries
        .iter()
        .filter(|old| {
            old.id != id
                && (old.status == TaskEntryStatus::Working
                    || old.created_at_ms.saturating_add(old.ttl_ms) > now)
        })
        .cloned()
        .chain(std::iter::once(entry))
        .collect();
    let excess = kept.len().saturating_sub(MAX_KEPT);
    kept.drain(..excess);
    kept
}

/// `entries` with task `id` ended as `end` says (nothing if it is not there).
pub(super) fn ended(
    entries: &[TaskEntry],
    id: &str,
    now: u64,
    end: impl FnOnce(&mut TaskEntry),
) -> Vec<TaskEntry> {
    let Some(mut entry) = entries.iter().find(|entry| entry.id == id).cloned() else {
        return entries.to_vec();
    };
    end(&mut entry);
    entry.updated_at_ms = now;
    with_entry(entries, entry, now)
}

/// Ends `entry` completed with the call's `output` (too large to keep: dropped, as an
/// idempotent result is), after a call that `moved` the instance to `state`.
pub(super) fn completed(entry: &mut TaskEntry, output: &PluginOutput, moved: bool, state: Value) {
    entry.status = TaskEntryStatus::Completed;
    entry.moved = moved;
    entry.state = state;
    match output {
        PluginOutput::Success(output) => {
            let size = serde_json::to_string(&output.value).map_or(usize::MAX, |t| t.len());
            if size > idempotency::MAX_OUTPUT_BYTES {
                entry.output_dropped = true;
            } else {
                entry.output = output.value.clone();
            }
        }
        PluginOutput::ToolError(message) | PluginOutput::BadInput(message) => {
            entry.error = json!({ "toolError": message });
        }
        PluginOutput::NeedsInput(requests) => {
            entry.error = json!({ "needsInput": requests.keys().collect::<Vec<_>>() });
        }
    }
}

/// Ends `entry` failed, with what is known: whether its handler ran (`true`, `false`, or
/// `"unknown"`), that nothing it did was saved, and why.
pub(super) fn failed(entry: &mut TaskEntry, handler_ran: Value, why: &str) {
    entry.status = TaskEntryStatus::Failed;
    entry.error = json!({ "handlerRan": handler_ran, "committed": false, "message": why });
}

/// The task `view` is saved as running, if any (one at most: it holds the instance).
pub(super) fn working(view: &InstanceView) -> Option<&TaskEntry> {
    TaskEntry::running(&view.tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, status: TaskEntryStatus, created_at_ms: u64) -> TaskEntry {
        TaskEntry {
            status,
            ..TaskEntry::working(id, "t", None, created_at_ms, 1_000)
        }
    }

    #[test]
    fn ended_tasks_go_after_their_ttl_and_the_newest_are_kept() {
        let old = entry("old", TaskEntryStatus::Completed, 0);
        let running = entry("running", TaskEntryStatus::Working, 0);
        let kept = with_entry(
            &[old, running],
            entry("new", TaskEntryStatus::Working, 5_000),
            5_000,
        );
        let ids: Vec<_> = kept.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["running", "new"]);
        let many: Vec<_> = (0..20)
            .map(|n| entry(&format!("t{n}"), TaskEntryStatus::Completed, 5_000))
            .collect();
        let kept = with_entry(&many, entry("last", TaskEntryStatus::Working, 5_000), 5_000);
        assert_eq!(kept.len(), MAX_KEPT);
        assert_eq!(kept.last().unwrap().id, "last");
    }

    #[test]
    fn an_end_keeps_what_is_known() {
        let tasks = vec![entry("a", TaskEntryStatus::Working, 10)];
        let after = ended(&tasks, "a", 20, |e| failed(e, json!("unknown"), "stopped"));
        assert_eq!(after[0].status, TaskEntryStatus::Failed);
        assert_eq!(after[0].error["handlerRan"], "unknown");
        assert_eq!(after[0].error["committed"], false);
        assert_eq!(after[0].updated_at_ms, 20);
        // An id it does not hold changes nothing.
        assert_eq!(
            ended(&tasks, "b", 20, |e| failed(e, json!(true), "x")),
            tasks
        );
    }
}

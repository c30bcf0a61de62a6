//! The stored record's format: its number, and the part of a record that format 1 did not have.
//!
//! This module owns how the fields added since format 1 (the machine version, the idempotency
//! entries) are encoded beside the columns every store has had from the start, and the rule
//! for reading a record whose format is older or newer than this build's. Each store keeps the
//! format number and this encoding in a place of its own (a redb side table, two Redis hash
//! fields, two PostgreSQL columns); a record without them was written by format-1 code.
//!
//! It must not interpret a snapshot or an idempotency entry's result: both are opaque here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreError;

/// The format this build writes. Every save stores it; [`decode`] reads it and every older one.
///
/// Format 3 adds the instance's tasks ([`Extras::tasks`]) to format 2's extras. It is a format
/// of its own so that code of format 2, which would drop them when it rewrote the record (a
/// running task's mark included), refuses such a record instead (`UnsupportedFormat`).
pub const CURRENT_FORMAT: u32 = 3;

/// The oldest format read as [`CURRENT_FORMAT`] with nothing to rewrite: format 3 only adds an
/// optional field to format 2. The start-up migration rewrites only older records.
pub const CURRENT_SINCE: u32 = 2;

/// What a record has beyond format 1's workflow, snapshot, version and time (format 2: the
/// machine version and idempotency entries; format 3: tasks). Stored as compact JSON text
/// ([`encode`]), so adding an optional field needs no schema change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Extras {
    /// The machine version the instance runs on (`catalog::machine_version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The results of recent calls that carried an idempotency key, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idempotency: Vec<IdempotencyEntry>,
    /// The instance's tasks (format 3): the one running, if any, and those that ended within
    /// their `ttl`, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskEntry>,
}

/// A call of the instance that runs, or ran, as a task (`host/src/tasks.rs`): kept with the
/// instance, so that any server sharing the store can say where it stands, and so that while
/// it runs the instance is known to be held by it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEntry {
    /// The task's id, as its client names it.
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Who started it (with authentication on): only they may see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    pub status: TaskEntryStatus,
    /// When it started and last changed, in unix milliseconds.
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// How long after `created_at_ms` it is kept (once ended).
    pub ttl_ms: u64,
    /// Ended `completed`: the plugin's output; `null` when it was too large to keep
    /// (`output_dropped`), as an idempotent result is.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub output: Value,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_dropped: bool,
    /// Ended `completed`: whether the call moved the instance, and its state after.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub moved: bool,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub state: Value,
    /// Ended `failed`: what is known of the call (`handlerRan`, `committed`, why).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub error: Value,
}

impl TaskEntry {
    /// The task running among an instance's `tasks`, if one is (at most one: it holds the
    /// instance until it ends).
    pub fn running(tasks: &[TaskEntry]) -> Option<&TaskEntry> {
        tasks
            .iter()
            .find(|entry| entry.status == TaskEntryStatus::Working)
    }

    /// Task `id` of `tool`, started by `principal` at `at_ms` and kept `ttl_ms`: working, with
    /// no end yet.
    pub fn working(
        id: &str,
        tool: &str,
        principal: Option<String>,
        at_ms: u64,
        ttl_ms: u64,
    ) -> TaskEntry {
        TaskEntry {
            id: id.to_owned(),
            tool: tool.to_owned(),
            principal,
            status: TaskEntryStatus::Working,
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
            ttl_ms,
            output: Value::Null,
            output_dropped: false,
            moved: false,
            state: Value::Null,
            error: Value::Null,
        }
    }
}

/// Where a stored task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskEntryStatus {
    /// Its handler runs, on the server holding the instance's lease: the instance is held.
    Working,
    Completed,
    Failed,
    Cancelled,
}

/// A call that carried an idempotency key, and what it came to: what a retry with the same key
/// gets instead of running again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyEntry {
    /// The client's key (`_meta.idempotencyKey`).
    pub key: String,
    /// The tool called.
    pub tool: String,
    /// A digest of the call's arguments, so a key reused for a different call is recognised.
    pub arguments: String,
    /// When the call ran, in unix milliseconds.
    pub at_ms: u64,
    /// The plugin's output; `null` when it was too large to keep (`output_dropped`).
    pub output: Value,
    /// Whether the call moved the instance.
    pub moved: bool,
    /// The instance's state value after the call.
    pub state: Value,
    /// The output was not kept (over the size remembered per entry, or pushed out by newer
    /// ones): a retry learns that the call ran, not what it answered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_dropped: bool,
}

/// `extras` as the text a store keeps.
pub fn encode(extras: &Extras) -> String {
    // Serializing strings, numbers and `Value`s into a string cannot fail.
    serde_json::to_string(extras).expect("record extras are plain JSON")
}

/// The format and extras of the record under `key`, from what a store found: `format` is
/// `None` when the record has no format number (format-1 code wrote it), `extras` the stored
/// text if any.
///
/// A format newer than [`CURRENT_FORMAT`] is refused with [`StoreError::UnsupportedFormat`]:
/// this build cannot know what it would drop by rewriting it, so it neither reads nor writes
/// such a record.
pub fn decode(
    key: &str,
    format: Option<u64>,
    extras: Option<&str>,
) -> Result<(u32, Extras), StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        key: key.to_owned(),
        reason,
    };
    match format {
        None | Some(1) => Ok((1, Extras::default())),
        Some(format @ (2 | 3)) => {
            let extras = match extras {
                None | Some("") => Extras::default(),
                Some(text) => serde_json::from_str(text)
                    .map_err(|e| corrupt(format!("format-{format} extras are not valid: {e}")))?,
            };
            Ok((format as u32, extras))
        }
        Some(0) => Err(corrupt("format number 0".to_owned())),
        Some(newer) => Err(StoreError::UnsupportedFormat {
            key: key.to_owned(),
            format: newer,
            reads_up_to: CURRENT_FORMAT,
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_record_without_a_format_is_format_1() {
        assert_eq!(decode("k", None, None).unwrap(), (1, Extras::default()));
        assert_eq!(decode("k", Some(1), None).unwrap(), (1, Extras::default()));
    }

    #[test]
    fn format_2_extras_round_trip() {
        let extras = Extras {
            machine: Some("ab".into()),
            idempotency: vec![IdempotencyEntry {
                key: "retry-1".into(),
                tool: "t".into(),
                arguments: "d".into(),
                at_ms: 5,
                output: json!({"ok": true}),
                moved: true,
                state: json!("review"),
                output_dropped: false,
            }],
            tasks: Vec::new(),
        };
        let text = encode(&extras);
        assert_eq!(decode("k", Some(2), Some(&text)).unwrap(), (2, extras));
        assert_eq!(decode("k", Some(2), None).unwrap(), (2, Extras::default()));
    }

    #[test]
    fn newer_formats_are_refused_and_damage_is_reported() {
        assert!(matches!(
            decode("k", Some(4), Some("{}")),
            Err(StoreError::UnsupportedFormat { format: 4, .. })
        ));
        assert!(matches!(
            decode("k", Some(2), Some("not json")),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(matches!(
            decode("k", Some(0), None),
            Err(StoreError::Corrupt { .. })
        ));
    }
}

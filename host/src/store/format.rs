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
pub const CURRENT_FORMAT: u32 = 2;

/// What a format-2 record has beyond format 1's workflow, snapshot, version and time. Stored as
/// compact JSON text ([`encode`]), so adding an optional field later needs no schema change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Extras {
    /// The machine version the instance runs on (`catalog::machine_version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The results of recent calls that carried an idempotency key, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idempotency: Vec<IdempotencyEntry>,
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
        Some(2) => {
            let extras = match extras {
                None | Some("") => Extras::default(),
                Some(text) => serde_json::from_str(text)
                    .map_err(|e| corrupt(format!("format-2 extras are not valid: {e}")))?,
            };
            Ok((2, extras))
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
        };
        let text = encode(&extras);
        assert_eq!(decode("k", Some(2), Some(&text)).unwrap(), (2, extras));
        assert_eq!(decode("k", Some(2), None).unwrap(), (2, Extras::default()));
    }

    #[test]
    fn newer_formats_are_refused_and_damage_is_reported() {
        assert!(matches!(
            decode("k", Some(3), Some("{}")),
            Err(StoreError::UnsupportedFormat { format: 3, .. })
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

//! The audit trail: one entry per transition an instance made, who or what made it, and when.
//! Money and data are at stake in these workflows, and someone will ask who discharged an
//! invoice.
//!
//! A save that moves an instance carries its entry ([`super::InstanceRecord::audit`]), and every
//! store appends it **in the same atomic write** as the record, so the trail holds exactly the
//! transitions that were saved: a save that loses its compare-and-set appends nothing. The trail
//! lives beside the record, not in it (a record is rewritten on every save; the trail only
//! grows), and is deleted with it. [`super::StateStore::audit`] reads it, oldest first.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One transition of an instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When it was saved, in unix milliseconds.
    pub at_ms: u64,
    /// The record version the transition saved (1 for the save that created the instance).
    pub version: u64,
    /// What made it: `tool:<name>` (a call), `timer` (a delayed transition), `operator:reset`
    /// (`turnstile instances reset`), `tasks/cancel:<tool>` (a step running as a task that its
    /// client cancelled: nothing fired, `from` and `to` are the same).
    pub by: String,
    /// The event that was taken (absent for a reset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The state value before (`null` for the save that created the instance).
    pub from: Value,
    /// The state value after.
    pub to: Value,
    /// Who made the call, with authentication on: the token's name or the JWT's `sub`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// What a person confirmed before the call ran, when its binding has one confirm
    /// (`confirm.rs`): the form's content (`{}` for a plain yes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Value>,
}

impl AuditEntry {
    /// The entry as the stores keep it: one line of JSON.
    pub(super) fn encode(&self) -> String {
        serde_json::to_string(self).expect("an audit entry is plain JSON")
    }

    /// An entry a store kept; `key` names the instance in the error.
    pub(super) fn decode(key: &str, text: &str) -> Result<AuditEntry, super::StoreError> {
        serde_json::from_str(text).map_err(|error| super::StoreError::Corrupt {
            key: key.to_owned(),
            reason: format!("an audit entry is not readable: {error}"),
        })
    }
}

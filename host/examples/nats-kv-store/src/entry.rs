//! The entry: everything the store keeps about one key, in one KV value.
//!
//! NATS KV compares and sets one key at a time and has no transaction over several, while the
//! contract wants a record, its audit trail, its lease and its tombstone changed together (a
//! save appends to the trail and is fenced by the lease in one atomic step; a delete leaves its
//! tombstone in the same step). So all four live in the key's one value, and every write is a
//! compare-and-set on that value's revision. This module owns that value and its encoding; it
//! must not talk to the server.

use serde::{Deserialize, Serialize};
use turnstile::store::{AuditEntry, CURRENT_FORMAT, InstanceRecord, StoreError, Tombstone};

use crate::lease::Lease;

/// What one key's value holds. Every part is optional: a key may hold only a tombstone (the
/// record was deleted), or a record and the tombstone of an earlier one (hidden while the
/// record lives).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The record, as `InstanceRecord` serializes it (no audit entry, no fence). Kept as JSON
    /// until read, so a record of a newer format is refused before it is parsed as this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<serde_json::Value>,
    /// The instance's last `audit_keep` audit entries, oldest first; go with the record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<AuditEntry>,
    /// The last lease granted on the record, kept after it lapses for its token; goes with
    /// the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// What the last delete that left one left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone: Option<Tombstone>,
}

impl Entry {
    /// The entry stored as `bytes` under `key` (named in the error).
    pub fn decode(key: &str, bytes: &[u8]) -> Result<Self, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| corrupt(key, format!("not an entry: {e}")))
    }

    pub fn encode(&self) -> Vec<u8> {
        // Plain data with string keys: serializing it cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The stored record's version, without parsing the rest of it (`None`: no record).
    pub fn version(&self) -> Option<u64> {
        self.record
            .as_ref()
            .map(|record| record["version"].as_u64().unwrap_or(0))
    }

    /// The record, refused if a newer server wrote it in a format this build does not read.
    pub fn record(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
        let Some(value) = &self.record else {
            return Ok(None);
        };
        let format = value["format"].as_u64().unwrap_or(1);
        if format > u64::from(CURRENT_FORMAT) {
            return Err(StoreError::UnsupportedFormat {
                key: key.to_owned(),
                format,
                reads_up_to: CURRENT_FORMAT,
            });
        }
        InstanceRecord::deserialize(value)
            .map(Some)
            .map_err(|e| corrupt(key, format!("not a record: {e}")))
    }

    /// Puts `record` in place of the stored one, appending its audit entry to the trail (the
    /// last `keep` entries stay). A record saved where none was starts a trail of its own.
    pub fn put_record(
        &mut self,
        key: &str,
        record: &InstanceRecord,
        keep: u64,
    ) -> Result<(), StoreError> {
        if self.record.is_none() {
            self.audit.clear();
            self.lease = None;
        }
        self.record = Some(
            serde_json::to_value(record).map_err(|e| StoreError::Invalid {
                key: key.to_owned(),
                reason: format!("the record does not serialize: {e}"),
            })?,
        );
        if let Some(entry) = &record.audit {
            self.audit.push(entry.clone());
            let over = self.audit.len().saturating_sub(keep as usize);
            self.audit.drain(..over);
        }
        Ok(())
    }

    /// Removes the record with its trail and lease (the tombstone stays).
    pub fn remove_record(&mut self) {
        self.record = None;
        self.audit.clear();
        self.lease = None;
    }

    /// Whether nothing is left worth a key.
    pub fn is_empty(&self) -> bool {
        self.record.is_none() && self.tombstone.is_none()
    }
}

fn corrupt(key: &str, reason: String) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        reason,
    }
}

/// The KV key a store key is kept under: `prefix` and the key's bytes in hex. NATS keys allow
/// only `[-/_=.a-zA-Z0-9]`, and handles carry `@` and more; hex keeps every key and sorts as
/// the key does, byte for byte.
pub(crate) fn kv_key(prefix: &str, key: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 2 * key.len());
    out.push_str(prefix);
    for byte in key.bytes() {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The store key `kv_key` made `hex` from; `None` for anything it did not make.
pub(crate) fn store_key(hex: &str) -> Option<String> {
    let digit = |c: u8| (c as char).to_digit(16);
    let bytes: Option<Vec<u8>> = hex
        .as_bytes()
        .chunks(2)
        .map(|pair| match pair {
            [high, low] => Some((digit(*high)? << 4 | digit(*low)?) as u8),
            _ => None,
        })
        .collect();
    String::from_utf8(bytes?).ok()
}

//! The record: one workflow instance as stored, with its due time, its size and the clock its
//! times are read from. What every store keeps, whatever it keeps it in.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{AuditEntry, CURRENT_FORMAT, Fence, IdempotencyEntry, TaskEntry, format};

/// One workflow instance as stored: what an instance actor needs to come back to life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// The record format (see the module docs): what the store found when loading, and always
    /// [`CURRENT_FORMAT`] when saving.
    #[serde(default = "format_1")]
    pub format: u32,
    /// Id of the workflow definition this instance runs.
    pub workflow: String,
    /// The engine's snapshot, opaque to the store.
    pub snapshot: serde_json::Value,
    /// Number of saves so far: 1 after the first save. Never 0 in a stored record.
    pub version: u64,
    /// When this version was written, in unix milliseconds (informational; never compared).
    pub updated_at_ms: u64,
    /// The machine version the instance runs on (`None` in a format-1 record: the one served
    /// now).
    #[serde(default)]
    pub machine: Option<String>,
    /// Results of recent calls that carried an idempotency key, oldest first.
    #[serde(default)]
    pub idempotency: Vec<IdempotencyEntry>,
    /// Its calls that run, or ran, as tasks (format 3; `format::TaskEntry`), oldest first.
    #[serde(default)]
    pub tasks: Vec<TaskEntry>,
    /// When the server must next look at this instance unaided, in unix milliseconds (`None`:
    /// never): the store indexes it for [`StateStore::due`]. At most [`MAX_DUE_MS`].
    #[serde(default)]
    pub due_at_ms: Option<u64>,
    /// The transition this save records, appended to the instance's audit trail by the same
    /// atomic write (see `audit.rs`); `None` for a save that moves nothing. Never read back as
    /// part of the record: [`StateStore::audit`] reads the trail.
    #[serde(skip)]
    pub audit: Option<AuditEntry>,
    /// The lease this save is made under (see `lease.rs`): checked by the same atomic write,
    /// never stored. `None`: the save is refused while anyone holds a lease on the record.
    #[serde(skip)]
    pub fence: Option<Fence>,
}

/// The latest due time any store accepts: PostgreSQL keeps it as a `bigint`. (A deadline that
/// far out, some 292 million years, is "never" for every practical purpose; callers clamp.)
pub const MAX_DUE_MS: u64 = i64::MAX as u64;

/// One entry of [`StateStore::due`]: a key and its due time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Due {
    /// The due time, in unix milliseconds.
    pub at_ms: u64,
    /// The record's key.
    pub key: String,
}

fn format_1() -> u32 {
    1
}

/// The largest record an instance may save unless configured otherwise (`--max-record-bytes`).
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;

/// Counts the bytes written to it, keeping none.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The bytes of `value` as JSON, counted without building the text.
pub fn json_bytes(value: &impl Serialize) -> usize {
    let mut count = ByteCount(0);
    // Writing to a counter cannot fail; a value that cannot be serialized counts as empty.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

impl InstanceRecord {
    /// About what the record takes in a store, as its save writes it: its snapshot (state and
    /// context), its remembered idempotent results and the audit entry the same write appends
    /// (which keeps a confirmation), as JSON: all that grows with what callers send.
    pub fn stored_bytes(&self) -> usize {
        json_bytes(&self.snapshot)
            + json_bytes(&self.idempotency)
            + json_bytes(&self.tasks)
            + self.audit.as_ref().map_or(0, json_bytes)
    }

    /// Version `version` of an instance of `workflow` in `snapshot`, written at
    /// `updated_at_ms`, in the current format, and nothing more: no machine version,
    /// idempotency entries, due time, audit entry or fence.
    ///
    /// Every record built here or by an instance actor starts from this one and sets what it
    /// has over it (`InstanceRecord { due_at_ms, ..InstanceRecord::new(..) }`), so that a field
    /// added to the record gets its value for all of them in this one place.
    pub fn new(
        workflow: impl Into<String>,
        snapshot: serde_json::Value,
        version: u64,
        updated_at_ms: u64,
    ) -> Self {
        Self {
            format: CURRENT_FORMAT,
            workflow: workflow.into(),
            snapshot,
            version,
            updated_at_ms,
            machine: None,
            idempotency: Vec::new(),
            tasks: Vec::new(),
            due_at_ms: None,
            audit: None,
            fence: None,
        }
    }

    /// A record for a new instance (version 1, stamped now): save it with `expected = 0`.
    pub fn first(workflow: impl Into<String>, snapshot: serde_json::Value) -> Self {
        Self::new(workflow, snapshot, 1, now_ms())
    }

    /// The record that follows `self` with a new snapshot, in the current format, keeping its
    /// machine version, idempotency entries and tasks, with no due time (it belongs to the old
    /// snapshot: set the new one's): save it with `expected = self.version`.
    pub fn next(&self, snapshot: serde_json::Value) -> Self {
        Self {
            machine: self.machine.clone(),
            idempotency: self.idempotency.clone(),
            tasks: self.tasks.clone(),
            ..Self::new(self.workflow.clone(), snapshot, self.version + 1, now_ms())
        }
    }

    /// `self`, saved under `fence` (see [`InstanceRecord::fence`]).
    pub fn fenced(self, fence: Option<Fence>) -> Self {
        Self { fence, ..self }
    }

    /// The fields added since format 1, as a store keeps them.
    pub(super) fn extras(&self) -> format::Extras {
        format::Extras {
            machine: self.machine.clone(),
            idempotency: self.idempotency.clone(),
            tasks: self.tasks.clone(),
        }
    }

    /// A record of `format` with `extras` and the format-1 fields, and no due time (see
    /// [`InstanceRecord::due`]).
    pub(super) fn assemble(
        format: u32,
        extras: format::Extras,
        workflow: String,
        snapshot: serde_json::Value,
        version: u64,
        updated_at_ms: u64,
    ) -> Self {
        Self {
            format,
            machine: extras.machine,
            idempotency: extras.idempotency,
            tasks: extras.tasks,
            ..Self::new(workflow, snapshot, version, updated_at_ms)
        }
    }

    /// `self` with the due time a store kept beside it.
    pub(super) fn due(self, due_at_ms: Option<u64>) -> Self {
        Self { due_at_ms, ..self }
    }
}

/// Current wall-clock time in unix milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

//! Errors of the statechart module: a machine (or a persisted snapshot) that cannot run.

/// A machine definition, or a persisted snapshot, that Turnstile refuses.
///
/// Displays as `"<json path>: <reason>"`, e.g.
/// `states.review.on.APPROVE: unknown target "aproved"`. The path names the offending place in
/// the JSON document (dot-separated keys, `[i]` for array items; empty for the document itself).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", if path.is_empty() { "(root)" } else { path.as_str() })]
pub struct MachineError {
    path: String,
    reason: String,
}

impl MachineError {
    pub(super) fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        MachineError {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// Where in the JSON document the problem is.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What is wrong there.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// XState's `maxIterations` for Turnstile: a macrostep that has taken this many microsteps
/// after its first one without settling is stopped (the differential test gives XState the
/// same bound).
pub const MAX_MICROSTEPS: usize = 1000;

/// A step stopped after [`MAX_MICROSTEPS`] eventless microsteps without settling (an
/// eventless loop). The instance keeps the snapshot it had before the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "eventless transitions looped: more than {} microsteps without settling",
    MAX_MICROSTEPS
)]
pub struct TransitionLoop;

/// An event that is neither a string nor an object with a string `type`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid event: {0}")]
pub struct EventError(pub(super) String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_path_colon_reason() {
        let e = MachineError::new("states.review.on.APPROVE", "unknown target \"aproved\"");
        assert_eq!(
            e.to_string(),
            "states.review.on.APPROVE: unknown target \"aproved\""
        );
        assert_eq!(e.path(), "states.review.on.APPROVE");
        assert_eq!(e.reason(), "unknown target \"aproved\"");
        assert_eq!(MachineError::new("", "x").to_string(), "(root): x");
    }
}

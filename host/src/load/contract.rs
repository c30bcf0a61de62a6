//! The gating contract, checked while loading, in terms that apply to any MCP server:
//!
//! - a refusal is an `isError` result whose `structuredContent.error.code` is `FORBIDDEN`;
//! - a transition is a successful call after which the caller's tool list differs;
//! - a session is subscribed to an instance when it touched it (in session mode, only its own).
//!
//! A listed tool is never refused; an unlisted one always is; every transition brings exactly
//! one `list_changed` to every subscribed session and none to others; of N racing calls on one
//! instance exactly one wins; an instance left alone keeps its menu (`--mint`). This module holds those judgements (pure functions) and the tally
//! of what broke them; the clients only report what they saw.

use std::{collections::BTreeMap, sync::Mutex};

use serde::Serialize;

use super::tools::Outcome;

/// How many examples of each kind of violation a report keeps.
const SAMPLES_PER_KIND: usize = 5;

/// A way the server broke the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Violation {
    /// A tool from the caller's current menu was refused.
    ListedRefused,
    /// A tool not in the caller's current menu (but listed earlier in the walk) was not refused.
    UnlistedNotRefused,
    /// A session heard fewer `list_changed` than the transitions it was subscribed to.
    MissingListChanged,
    /// A session heard more `list_changed` than the transitions it was subscribed to.
    ExtraListChanged,
    /// Racing calls that moved one instance on had other than exactly one winner.
    RaceWinners,
    /// A scenario step ended otherwise than its `expect` said.
    UnexpectedOutcome,
    /// `--mint --after-mint-wait`: an instance listed another menu after its sessions ended than
    /// right after it was minted (on Turnstile: it did not come back from its store as left).
    InstanceChanged,
}

impl Violation {
    pub fn as_str(self) -> &'static str {
        match self {
            Violation::ListedRefused => "listed_refused",
            Violation::UnlistedNotRefused => "unlisted_not_refused",
            Violation::MissingListChanged => "missing_list_changed",
            Violation::ExtraListChanged => "extra_list_changed",
            Violation::RaceWinners => "race_winners",
            Violation::UnexpectedOutcome => "unexpected_outcome",
            Violation::InstanceChanged => "instance_changed",
        }
    }
}

/// Why a call was made, which decides what answer it must get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallIntent {
    /// A tool from the current menu, in a session no other session races with.
    Listed,
    /// A tool from the current menu that other sessions may be moving on at the same moment
    /// (`--race`): a refusal there only means another call won.
    ListedRacing,
    /// A tool listed earlier in this walk but not now: a probe that must be refused.
    Unlisted,
}

/// The verdict on one call, given why it was made.
pub fn judge_call(intent: CallIntent, outcome: &Outcome) -> Option<Violation> {
    match (intent, outcome) {
        (CallIntent::Listed, Outcome::Refused) => Some(Violation::ListedRefused),
        (CallIntent::Unlisted, Outcome::Refused) => None,
        (CallIntent::Unlisted, _) => Some(Violation::UnlistedNotRefused),
        _ => None,
    }
}

/// The verdict on one session's notifications: it was subscribed to `transitions` transitions
/// and heard `heard` `list_changed`.
pub fn judge_notifications(transitions: u64, heard: u64) -> Option<Violation> {
    match heard.cmp(&transitions) {
        std::cmp::Ordering::Less => Some(Violation::MissingListChanged),
        std::cmp::Ordering::Greater => Some(Violation::ExtraListChanged),
        std::cmp::Ordering::Equal => None,
    }
}

/// The verdict on one race: `winners` calls succeeded, and the instance moved on (`moved`) or
/// not. A race on a call that moves nothing (a read) may have any number of winners.
pub fn judge_race(winners: usize, moved: bool) -> Option<Violation> {
    (moved && winners != 1).then_some(Violation::RaceWinners)
}

/// Every violation seen, counted by kind, with the first few as samples.
#[derive(Default)]
pub struct Violations {
    // A std Mutex: held to bump a count, never across an await.
    by_kind: Mutex<BTreeMap<Violation, Tally>>,
}

/// One kind's count and samples.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Tally {
    pub count: u64,
    pub samples: Vec<String>,
}

impl Violations {
    /// Records one violation; `sample` (built only if kept) says what happened.
    pub fn record(&self, kind: Violation, sample: impl FnOnce() -> String) {
        let mut by_kind = self.by_kind.lock().unwrap_or_else(|p| p.into_inner());
        let tally = by_kind.entry(kind).or_default();
        tally.count += 1;
        if tally.samples.len() < SAMPLES_PER_KIND {
            tally.samples.push(sample());
        }
    }

    pub fn total(&self) -> u64 {
        self.snapshot().values().map(|t| t.count).sum()
    }

    pub fn snapshot(&self) -> BTreeMap<Violation, Tally> {
        self.by_kind
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Outcome {
        Outcome::Ok { structured: None }
    }

    #[test]
    fn a_listed_tool_must_not_be_refused_unless_racing() {
        assert_eq!(
            judge_call(CallIntent::Listed, &Outcome::Refused),
            Some(Violation::ListedRefused)
        );
        assert_eq!(
            judge_call(CallIntent::ListedRacing, &Outcome::Refused),
            None
        );
        assert_eq!(judge_call(CallIntent::Listed, &ok()), None);
        // Other errors are the tool's business, not gating's.
        let busy = Outcome::ToolError {
            code: Some("BUSY".into()),
        };
        assert_eq!(judge_call(CallIntent::Listed, &busy), None);
    }

    #[test]
    fn an_unlisted_tool_must_be_refused_with_forbidden() {
        assert_eq!(judge_call(CallIntent::Unlisted, &Outcome::Refused), None);
        for outcome in [
            ok(),
            Outcome::ToolError { code: None },
            Outcome::RpcError {
                code: -32602,
                message: String::new(),
            },
        ] {
            assert_eq!(
                judge_call(CallIntent::Unlisted, &outcome),
                Some(Violation::UnlistedNotRefused),
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn exactly_one_list_changed_per_transition() {
        assert_eq!(judge_notifications(3, 3), None);
        assert_eq!(judge_notifications(0, 0), None);
        assert_eq!(
            judge_notifications(3, 2),
            Some(Violation::MissingListChanged)
        );
        assert_eq!(judge_notifications(0, 1), Some(Violation::ExtraListChanged));
    }

    #[test]
    fn a_race_that_moves_the_instance_has_one_winner() {
        assert_eq!(judge_race(1, true), None);
        assert_eq!(judge_race(2, true), Some(Violation::RaceWinners));
        assert_eq!(judge_race(0, true), Some(Violation::RaceWinners));
        assert_eq!(judge_race(8, false), None);
    }

    #[test]
    fn tallies_count_everything_and_keep_a_few_samples() {
        let violations = Violations::default();
        for n in 0..9 {
            violations.record(Violation::ExtraListChanged, || format!("sample {n}"));
        }
        violations.record(Violation::RaceWinners, || "race".into());
        let snapshot = violations.snapshot();
        assert_eq!(snapshot[&Violation::ExtraListChanged].count, 9);
        assert_eq!(
            snapshot[&Violation::ExtraListChanged].samples.len(),
            SAMPLES_PER_KIND
        );
        assert_eq!(violations.total(), 10);
    }
}

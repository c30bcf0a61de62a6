//! `--scenario FILE`: exact call sequences instead of the walk, for a user who knows the
//! workflow (and for throughput runs that should not spend requests on listing). The format,
//! version 1:
//!
//! ```json
//! {
//!   "version": 1,
//!   "start":  [{"tool": "invoice.submit", "arguments": {"amount": 10}, "transition": true}],
//!   "repeat": [{"tool": "invoice.reject", "arguments": {"reason": "load"}, "transition": true},
//!              {"tool": "invoice.submit", "arguments": {"amount": 10}, "transition": true},
//!              {"tool": "invoice.discharge", "arguments": {}, "expect": "refused"}]
//! }
//! ```
//!
//! `start` runs once per session, then `repeat` runs over and over (one pass is one iteration;
//! with `--churn`, each pass gets a new session and runs `start` again). A step names a `tool`,
//! its `arguments` (an object; in handle mode the handle is added), what it must end in,
//! `expect` (`ok`, the default; `refused`, i.e. FORBIDDEN; `error`, any other tool error or
//! JSON-RPC error; `any`), and whether a success is a `transition` (the session must then hear
//! exactly one `list_changed` for it, checked when the session ends). A step that ends
//! otherwise than expected is an `unexpected_outcome` violation.

use std::{path::Path, sync::Arc};

use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::task::JoinSet;

use super::{
    Shared,
    contract::{CallIntent, Violation},
    conversation::Conversation,
    tools::Outcome,
};

/// A parsed scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub version: u32,
    #[serde(default)]
    pub start: Vec<Step>,
    #[serde(default)]
    pub repeat: Vec<Step>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub tool: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
    #[serde(default)]
    pub expect: Expect,
    #[serde(default)]
    pub transition: bool,
}

/// What a step must end in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    #[default]
    Ok,
    Refused,
    Error,
    Any,
}

impl Expect {
    fn accepts(self, outcome: &Outcome) -> bool {
        match self {
            Expect::Ok => matches!(outcome, Outcome::Ok { .. }),
            Expect::Refused => matches!(outcome, Outcome::Refused),
            Expect::Error => matches!(
                outcome,
                Outcome::ToolError { .. } | Outcome::RpcError { .. }
            ),
            Expect::Any => true,
        }
    }
}

impl Scenario {
    /// Reads and checks a scenario file; the error names the problem.
    pub fn load(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| anyhow::anyhow!("cannot read scenario {}: {error}", path.display()))?;
        Scenario::parse(&text)
            .map_err(|error| anyhow::anyhow!("scenario {}: {error}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Scenario> {
        let scenario: Scenario = serde_json::from_str(text)?;
        anyhow::ensure!(
            scenario.version == 1,
            "version {} is not known (this turnstile reads version 1)",
            scenario.version
        );
        anyhow::ensure!(
            !scenario.repeat.is_empty(),
            "`repeat` is empty: a scenario needs at least one step to repeat"
        );
        Ok(scenario)
    }
}

/// One client running the scenario.
pub async fn run_client(shared: Arc<Shared>, scenario: Arc<Scenario>) {
    let mut conversation: Option<Conversation> = None;
    let mut ending = JoinSet::new();
    let mut passes = 0u64;
    while !shared.should_stop(passes) {
        let mut current = match conversation.take() {
            Some(current) => current,
            None => match Conversation::open(&shared).await {
                Ok(mut opened) => {
                    if !run_steps(&mut opened, &scenario.start, &shared).await {
                        ending.spawn(opened.finish());
                        shared.back_off().await;
                        continue;
                    }
                    opened
                }
                Err(error) => {
                    shared.stats.error(error.kind());
                    shared.back_off().await;
                    continue;
                }
            },
        };
        let completed = run_steps(&mut current, &scenario.repeat, &shared).await;
        passes += 1;
        shared.stats.iteration();
        if shared.settings.churn || !completed {
            ending.spawn(current.finish());
        } else {
            conversation = Some(current);
        }
    }
    shared.client_done();
    if let Some(current) = conversation {
        ending.spawn(current.finish());
    }
    ending.join_all().await;
}

/// Runs `steps` in order; false if one got no answer (the session is then given up).
async fn run_steps(conversation: &mut Conversation, steps: &[Step], shared: &Shared) -> bool {
    for step in steps {
        if shared.is_stopped() {
            return true;
        }
        let arguments = Value::Object(step.arguments.clone());
        // An `ok` step is a listed tool as far as the scenario's author knows; other steps
        // carry no claim about the menu, and their expectation is the whole check.
        let intent = CallIntent::ListedRacing;
        let Some((outcome, _)) = conversation.call(&step.tool, arguments, intent, true).await
        else {
            return false;
        };
        if !step.expect.accepts(&outcome) {
            let session = conversation.session_id().unwrap_or("-").to_string();
            shared.violations.record(Violation::UnexpectedOutcome, || {
                format!(
                    "{} expected {:?}, answered {} (session {session})",
                    step.tool,
                    step.expect,
                    outcome.kind()
                )
            });
        }
        if step.transition && matches!(outcome, Outcome::Ok { .. }) {
            let counted = shared.stats.transition();
            conversation.subscribed_transition(None, counted).await;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("scenario.rs");
        let start = doc.find("```json").unwrap() + "```json".len();
        let end = start + doc[start..].find("```").unwrap();
        let example: String = doc[start..end]
            .lines()
            .map(|line| line.trim_start().trim_start_matches("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let scenario = Scenario::parse(&example).expect("the example in the docs parses");
        assert_eq!(scenario.repeat.len(), 3);
        assert_eq!(scenario.repeat[2].expect, Expect::Refused);
        assert!(scenario.start[0].transition);
    }

    #[test]
    fn mistakes_are_named() {
        let unknown = Scenario::parse(r#"{"version":1,"repeat":[{"tool":"a","expct":"ok"}]}"#);
        assert!(unknown.unwrap_err().to_string().contains("expct"));
        let version = Scenario::parse(r#"{"version":2,"repeat":[{"tool":"a"}]}"#);
        assert!(version.unwrap_err().to_string().contains("version 2"));
        let empty = Scenario::parse(r#"{"version":1,"start":[{"tool":"a"}]}"#);
        assert!(empty.unwrap_err().to_string().contains("repeat"));
        let expect = Scenario::parse(r#"{"version":1,"repeat":[{"tool":"a","expect":"maybe"}]}"#);
        assert!(expect.is_err());
    }

    #[test]
    fn expectations_match_outcomes() {
        let ok = Outcome::Ok { structured: None };
        let busy = Outcome::ToolError {
            code: Some("BUSY".into()),
        };
        assert!(Expect::Ok.accepts(&ok) && !Expect::Ok.accepts(&Outcome::Refused));
        assert!(Expect::Refused.accepts(&Outcome::Refused) && !Expect::Refused.accepts(&busy));
        assert!(Expect::Error.accepts(&busy) && !Expect::Error.accepts(&Outcome::Refused));
        assert!(Expect::Any.accepts(&busy));
    }
}

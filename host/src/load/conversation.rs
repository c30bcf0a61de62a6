//! One client's side of the contract: a session, the instance it works on (its handle, in
//! handle mode), and the number of transitions it was subscribed to, against which the
//! `list_changed` it hears are judged when it ends.
//!
//! Every request a driver (walk, scenario, race) makes goes through here, so that each is timed,
//! counted and judged the same way.

use std::{sync::Arc, time::Duration};

use rand::{rngs::StdRng, seq::IndexedRandom};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    Shared,
    client::Session,
    contract::{self, CallIntent},
    schema_args,
    tools::{self, Menu, Outcome},
    wire::{ClientError, Notices},
};

/// What [`Conversation::mint`] did: the menu before and after the minting call, and when that
/// call was due to start.
pub struct Minted {
    pub before: Menu,
    pub after: Menu,
    pub due: Instant,
}

/// How long a session that ends waits for notifications still on their way.
const SETTLE: Duration = Duration::from_millis(200);

pub struct Conversation {
    shared: Arc<Shared>,
    session: Session,
    /// The instance this client works on, in handle mode, once a call minted it.
    pub handle: Option<String>,
    /// Transitions this session was subscribed to: the `list_changed` it must hear.
    transitions: u64,
}

impl Conversation {
    /// Opens a session, timing it as setup.
    pub async fn open(shared: &Arc<Shared>) -> Result<Conversation, ClientError> {
        let started = Instant::now();
        let session = Session::open(shared.endpoint.clone()).await?;
        shared.stats.setup(started.elapsed());
        Ok(Conversation {
            shared: shared.clone(),
            session,
            handle: None,
            transitions: 0,
        })
    }

    /// `tools/list` for this client's instance; `None` (counted as an error) if it failed.
    pub async fn list(&mut self) -> Option<Menu> {
        let meta = match (&self.shared.settings.handle_key, &self.handle) {
            (Some(key), Some(handle)) => Some(json!({ key.as_str(): handle })),
            _ => None,
        };
        let started = Instant::now();
        match tools::list(&mut self.session, meta.as_ref()).await {
            Ok(menu) => {
                self.shared.stats.list(started.elapsed());
                Some(menu)
            }
            Err(error) => {
                self.shared.stats.error(error.kind());
                None
            }
        }
    }

    /// `tools/call`, paced, timed and judged; `None` (counted as an error) if no answer came.
    /// `valid` says whether the arguments were made to satisfy the schema: only then is a
    /// JSON-RPC error unexpected. Returns the outcome and when the call was due to start.
    pub async fn call(
        &mut self,
        tool: &str,
        mut arguments: Value,
        intent: CallIntent,
        valid: bool,
    ) -> Option<(Outcome, Instant)> {
        if let (Some(key), Some(handle), Some(object)) = (
            &self.shared.settings.handle_key,
            &self.handle,
            arguments.as_object_mut(),
        ) {
            object.insert(key.clone(), Value::String(handle.clone()));
        }
        let due = self.shared.pacer.next_start().await;
        let answer = tools::call(&mut self.session, tool, arguments).await;
        let latency = due.elapsed();
        let outcome = match answer {
            Ok(outcome) => outcome,
            Err(error) => {
                self.shared.stats.error(error.kind());
                return None;
            }
        };
        self.shared.stats.call(latency, outcome.kind());
        if valid && let Outcome::RpcError { .. } = outcome {
            self.shared
                .stats
                .error(format!("{tool}: {}", outcome.kind()));
        }
        if let Some(violation) = contract::judge_call(intent, &outcome) {
            let session = self.session.id().unwrap_or("-").to_string();
            let handle = self.handle.clone();
            self.shared.violations.record(violation, || {
                format!(
                    "{tool} ({}) answered {} (session {session}, handle {})",
                    describe(intent),
                    outcome.kind(),
                    handle.as_deref().unwrap_or("-")
                )
            });
        }
        self.adopt_handle(&outcome);
        Some((outcome, due))
    }

    /// In handle mode, a successful call made without a handle minted one: the result carries
    /// it under the handle key.
    fn adopt_handle(&mut self, outcome: &Outcome) {
        let (
            Some(key),
            None,
            Outcome::Ok {
                structured: Some(structured),
            },
        ) = (&self.shared.settings.handle_key, &self.handle, outcome)
        else {
            return;
        };
        if let Some(handle) = structured.get(key).and_then(Value::as_str) {
            self.handle = Some(handle.to_string());
        }
    }

    /// Notes a transition this session is subscribed to, so it must hear one more
    /// `list_changed`; when `since` is given, waits for it (up to `--notify-timeout`) and, if the
    /// transition was `counted` ([`super::stats::Stats::transition`]), records how long after
    /// `since` it came.
    pub async fn subscribed_transition(&mut self, since: Option<Instant>, counted: bool) {
        self.transitions += 1;
        let Some(since) = since else {
            return;
        };
        let heard = self
            .session
            .notices()
            .wait_for(self.transitions, self.shared.settings.notify_timeout)
            .await;
        if let Some(at) = heard
            && counted
        {
            let at = Instant::from_std(at);
            self.shared
                .stats
                .notification_delay(at.saturating_duration_since(since));
        }
    }

    /// Ends the session, judging what it heard against the transitions it was subscribed to.
    pub async fn finish(self) {
        let notices = self.session.notices().clone();
        // Wait for late notifications, then a little longer for any extra one.
        notices
            .wait_for(self.transitions, self.shared.settings.notify_timeout)
            .await;
        tokio::time::sleep(SETTLE).await;
        let heard = notices.count();
        if let Some(violation) = contract::judge_notifications(self.transitions, heard) {
            let session = self.session.id().unwrap_or("-").to_string();
            let transitions = self.transitions;
            self.shared.violations.record(violation, || {
                format!(
                    "session {session}: subscribed to {transitions} transition(s), heard {heard} \
                     list_changed"
                )
            });
        }
        self.session.close().await;
    }

    /// Handle mode: starts a new instance of this client's own with one of the listed tools
    /// that is not read-only (the call mints its handle). `None` if the listing or the call
    /// failed, or if no handle came back (counted as an error, prefixed `what`).
    pub async fn mint(&mut self, rng: &mut StdRng, what: &str) -> Option<Minted> {
        let handle_key = self.shared.settings.handle_key.clone();
        self.handle = None;
        let before = self.list().await?;
        let movers: Vec<_> = before.iter().filter(|tool| !tool.read_only).collect();
        let tool = movers.choose(rng)?;
        let name = tool.name.clone();
        let arguments = schema_args::valid(&tool.input_schema, handle_key.as_deref(), rng);
        let (outcome, due) = self
            .call(&name, arguments, CallIntent::Listed, true)
            .await?;
        if !matches!(outcome, Outcome::Ok { .. }) || self.handle.is_none() {
            self.shared.stats.error(format!(
                "{what}: {name} minted no handle ({})",
                outcome.kind()
            ));
            return None;
        }
        let after = self.list().await?;
        Some(Minted { before, after, due })
    }

    /// Ends the session without judging its notifications as a whole: for a driver that judged
    /// them transition by transition (`--fanout`), or that does not follow them (`--mint`).
    pub async fn close(self) {
        self.session.close().await;
    }

    /// The `list_changed` this session heard so far.
    pub fn heard(&self) -> u64 {
        self.session.notices().count()
    }

    pub fn notices(&self) -> &Arc<Notices> {
        self.session.notices()
    }

    pub fn session_id(&self) -> Option<&str> {
        self.session.id()
    }
}

fn describe(intent: CallIntent) -> &'static str {
    match intent {
        CallIntent::Listed => "listed",
        CallIntent::ListedRacing => "listed, racing",
        CallIntent::Unlisted => "not listed",
    }
}

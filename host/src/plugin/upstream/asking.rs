//! What the upstream asks during a call (elicitation, sampling, roots), put to the person through
//! the host's ask path.
//!
//! The host asks as it does for a library (`turnstile_plugin_abi::asking`): a run that needs an
//! answer ends with the request, the host gets the answer, and runs the call again with every
//! answer so far. So an upstream call is run again too: its `n`th request is answered from the
//! answer to `upstream-n` when the host has one, and otherwise ends this run (the upstream's call
//! is cancelled) with `upstream-n` asked. An upstream tool must, like a library's handler, be
//! safe to run again up to the point where it asks.

use std::sync::{
    Mutex, PoisonError,
    atomic::{AtomicUsize, Ordering},
};

use serde_json::{Map, Value, json};
use tokio::sync::Notify;

/// One call's side of asking: the answers the host has, and the request this run stopped at.
#[derive(Default)]
pub struct Asking {
    /// `ctx.asking.responses`: every answer so far, by key.
    answers: Map<String, Value>,
    /// Whether the host can ask for this call at all (`ctx.asking` is not `null`).
    can_ask: bool,
    /// How many requests the upstream made in this run.
    round: AtomicUsize,
    /// The request this run stopped at, by its key.
    needed: Mutex<Option<(String, Value)>>,
    /// Woken when `needed` is set: the call ends.
    stop: Notify,
}

/// What becomes of one request the upstream made.
pub enum Reply {
    /// The host has the answer (the request's result, as the client sent it).
    Answer(Value),
    /// The run ends here, to ask the person; the upstream's request is refused meanwhile.
    Asked,
    /// Nobody can be asked on this call: the upstream is told no (it may go on without).
    Refused,
}

impl Asking {
    /// The asking of a call whose context says `asking` (`{"canAsk", "responses"}` or `null`).
    pub fn new(asking: &Value) -> Asking {
        Asking {
            answers: asking
                .get("responses")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            can_ask: !asking.is_null(),
            ..Asking::default()
        }
    }

    /// The upstream asks `method` with `params`.
    pub fn request(&self, method: &str, params: Value) -> Reply {
        let round = self.round.fetch_add(1, Ordering::Relaxed) + 1;
        let key = format!("upstream-{round}");
        if let Some(answer) = self.answers.get(&key) {
            return Reply::Answer(answer.clone());
        }
        if !self.can_ask {
            return Reply::Refused;
        }
        *self.needed.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((key, json!({"method": method, "params": params})));
        self.stop.notify_one();
        Reply::Asked
    }

    /// Resolves once a request ended the run.
    pub async fn stopped(&self) {
        self.stop.notified().await;
    }

    /// The requests the run stopped at, as a `NEEDS_INPUT` answer carries them.
    pub fn needed(&self) -> Option<Map<String, Value>> {
        let (key, request) = self
            .needed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        Some(Map::from_iter([(key, request)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_answered_in_order_and_the_first_unanswered_one_is_asked() {
        let asking = Asking::new(&json!({
            "canAsk": ["elicitation.form"],
            "responses": {"upstream-1": {"action": "accept", "content": {"ok": true}}},
        }));
        let Reply::Answer(first) = asking.request("elicitation/create", json!({})) else {
            panic!("the first request has its answer");
        };
        assert_eq!(first["action"], "accept");
        assert!(matches!(
            asking.request("roots/list", json!({})),
            Reply::Asked
        ));
        let needed = asking.needed().unwrap();
        assert_eq!(needed["upstream-2"]["method"], "roots/list");
    }

    #[test]
    fn without_a_way_to_ask_the_upstream_is_refused() {
        let asking = Asking::new(&Value::Null);
        assert!(matches!(
            asking.request("roots/list", json!({})),
            Reply::Refused
        ));
        assert!(asking.needed().is_none());
    }
}

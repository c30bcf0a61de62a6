//! Asking the person (ABI 1.4): how a handler gets input it cannot get from the model's
//! arguments alone: a form filled in by the user (elicitation), a completion from the client's
//! model (sampling), or the client's roots.
//!
//! The semantics are those of MCP's input-required results (SEP-2322), whatever the protocol
//! revision the client speaks:
//!
//! 1. The handler asks for each input by a key of its choosing ([`CallContext::ask`]). When the
//!    answer to that key is not there yet, the call ends with [`ToolError::NeedsInput`], carrying
//!    every request asked for so far. Nothing fires and nothing is saved.
//! 2. The host gets the answers: as requests to the client on the 2025 revisions, as an
//!    input-required result the client retries on 2026-07-28.
//! 3. The host runs the handler again, in a fresh call, with every answer so far
//!    ([`CallContext::answer`]). The handler asks again, now gets its answers, and goes on.
//!
//! So **a handler must be safe to run again up to the point where it asks**: ask before doing
//! anything the world sees (charging a card), never after. Between two runs the instance may
//! move: the host checks the gate again before each run, so a handler never runs in a state
//! that no longer offers its tool.
//!
//! Only what the client declared it can answer is asked ([`CallContext::can_ask`]); a request
//! the client cannot answer ends the call with `INPUT_UNAVAILABLE`, naming what was needed (on
//! 2026-07-28, whose requests declare the client's capabilities each time, the request is
//! refused instead with JSON-RPC -32021, naming the capabilities it lacks).

use serde_json::{Map, Value, json};

use crate::{CallContext, ToolError};

/// The kinds of input a client may be able to give, as [`CallContext::can_ask`] names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputKind {
    /// A form the user fills in (`elicitation/create`, form mode).
    Form,
    /// A URL the user is sent to (`elicitation/create`, URL mode).
    Url,
    /// A completion from the client's model (`sampling/createMessage`).
    Sampling,
    /// The client's roots (`roots/list`).
    Roots,
}

impl InputKind {
    /// The name the host uses for this kind in [`CallContext`]'s `can_ask` list.
    pub const fn as_str(self) -> &'static str {
        match self {
            InputKind::Form => "elicitation.form",
            InputKind::Url => "elicitation.url",
            InputKind::Sampling => "sampling",
            InputKind::Roots => "roots",
        }
    }
}

/// One request for input: an MCP request the client answers (`method` and `params`), as it
/// appears in an input-required result's `inputRequests`.
#[derive(Clone, Debug, PartialEq)]
pub struct InputRequest {
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: &'static str,
    /// The request's params.
    pub params: Value,
}

impl InputRequest {
    /// A form for the user: `message` says what is asked, `schema` is the flat object schema of
    /// the fields (strings, numbers, integers, booleans and enums, with `default`s; see MCP's
    /// elicitation). The answer is `{"action": "accept" | "decline" | "cancel", "content"}`.
    pub fn form(message: impl Into<String>, schema: Value) -> Self {
        InputRequest {
            method: "elicitation/create",
            params: json!({"mode": "form", "message": message.into(), "requestedSchema": schema}),
        }
    }

    /// A URL the user must visit (sign-in, payment pages), identified by `elicitation_id`. The
    /// answer is `{"action"}`; what happens at the URL reaches the plugin by its own means.
    pub fn url(
        message: impl Into<String>,
        url: impl Into<String>,
        elicitation_id: impl Into<String>,
    ) -> Self {
        InputRequest {
            method: "elicitation/create",
            params: json!({"mode": "url", "message": message.into(), "url": url.into(),
                "elicitationId": elicitation_id.into()}),
        }
    }

    /// A completion from the client's model: one user message, at most `max_tokens` tokens.
    /// The answer is `{"role": "assistant", "content": {"type": "text", "text"}, "model",
    /// "stopReason"}`. For more control, build the params yourself with [`InputRequest::sampling`].
    pub fn sample(prompt: impl Into<String>, max_tokens: u32) -> Self {
        Self::sampling(json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": prompt.into()}}],
            "maxTokens": max_tokens,
        }))
    }

    /// A completion from the client's model with these `sampling/createMessage` params.
    pub fn sampling(params: Value) -> Self {
        InputRequest {
            method: "sampling/createMessage",
            params,
        }
    }

    /// The client's roots. The answer is `{"roots": [{"uri", "name"}]}`.
    pub fn roots() -> Self {
        InputRequest {
            method: "roots/list",
            params: json!({}),
        }
    }

    /// The kind of input this asks for.
    pub fn kind(&self) -> InputKind {
        match self.method {
            "sampling/createMessage" => InputKind::Sampling,
            "roots/list" => InputKind::Roots,
            _ if self.params["mode"] == "url" => InputKind::Url,
            _ => InputKind::Form,
        }
    }

    /// As it crosses the ABI: `{"method", "params"}`.
    pub fn to_json(&self) -> Value {
        json!({"method": self.method, "params": self.params})
    }
}

/// The most requests one run may return.
pub const MAX_REQUESTS: usize = 16;

/// The longest key a request may have.
pub const MAX_KEY_CHARS: usize = 64;

/// Keys the host asks under itself (a binding's confirmation): no plugin may ask under them.
pub const HOST_KEY_PREFIX: &str = "turnstile.";

/// The key the host asks a binding's confirmation under
/// ([`ToolManifest::confirm`](crate::ToolManifest::confirm)), and tells the handler what the
/// person confirmed under (read it with [`CallContext::confirmation`]).
pub const CONFIRM_KEY: &str = "turnstile.confirm";

/// The requests a handler's [`crate::abi::Status::NEEDS_INPUT`] output carries, checked: an
/// object of 1 to [`MAX_REQUESTS`] requests, each under a key of 1 to [`MAX_KEY_CHARS`]
/// characters, each `{"method", "params"}` with a method the host can ask and object params (a
/// form's with an object `requestedSchema`, a URL's with a `url`). The host checks what every
/// plugin returns with this, before anything is asked.
pub fn check_requests(output: &Value) -> Result<Map<String, Value>, String> {
    let Some(requests) = output.get("inputRequests").and_then(Value::as_object) else {
        return Err("inputRequests is not an object".to_owned());
    };
    if requests.is_empty() || requests.len() > MAX_REQUESTS {
        return Err(format!(
            "inputRequests holds {} requests (1 to {MAX_REQUESTS} allowed)",
            requests.len()
        ));
    }
    for (key, request) in requests {
        if key.is_empty() || key.chars().count() > MAX_KEY_CHARS {
            return Err(format!(
                "input request key {key:?} is not 1 to {MAX_KEY_CHARS} characters"
            ));
        }
        if key.starts_with(HOST_KEY_PREFIX) {
            return Err(format!(
                "input request key {key:?}: keys starting with {HOST_KEY_PREFIX:?} are the host's"
            ));
        }
        let params = request.get("params").unwrap_or(&Value::Null);
        let problem = match request.get("method").and_then(Value::as_str) {
            Some("roots/list") if params.is_null() || params.is_object() => None,
            Some("sampling/createMessage") if params["messages"].is_array() => None,
            Some("sampling/createMessage") => Some("its params have no messages array"),
            Some("elicitation/create") if params["mode"] == "url" => {
                (!params["url"].is_string()).then_some("a URL elicitation needs a url")
            }
            Some("elicitation/create") => (!params["requestedSchema"].is_object()
                || !params["message"].is_string())
            .then_some("a form elicitation needs a message and an object requestedSchema"),
            Some(_) | None => {
                Some("its method is not elicitation/create, sampling/createMessage or roots/list")
            }
        };
        if let Some(problem) = problem {
            return Err(format!("input request {key:?}: {problem}"));
        }
    }
    Ok(requests.clone())
}

impl CallContext {
    /// The answer to the input asked for under `key` in an earlier run of this call, if the
    /// client has given it (see the module docs).
    pub fn answer(&self, key: &str) -> Option<&Value> {
        self.asking.get("responses")?.get(key)
    }

    /// What the person confirmed before this run, when the tool's binding has one confirm
    /// ([`ToolManifest::confirm`](crate::ToolManifest::confirm)) and they accepted: the
    /// form's fields as the host kept them (only those its schema declares, each within its
    /// bounds; `{}` for a plain yes). `None` when nothing was confirmed for this call (the
    /// binding's `when` did not hold, or it has none).
    pub fn confirmation(&self) -> Option<&Value> {
        let answer = self.answer(CONFIRM_KEY)?;
        if answer["action"] == "accept" {
            answer.get("content")
        } else {
            None
        }
    }

    /// Whether the client can answer requests of `kind` (the host says so from the client's
    /// declared capabilities). Ask only for what it can: the host refuses a call that asks for
    /// more with `INPUT_UNAVAILABLE` (on 2026-07-28, -32021 naming the missing capability).
    pub fn can_ask(&self, kind: InputKind) -> bool {
        self.asking["canAsk"]
            .as_array()
            .is_some_and(|kinds| kinds.iter().any(|k| k == kind.as_str()))
    }

    /// The answer to `request`, asked under `key`: `Ok` once the client has given it; until
    /// then [`ToolError::NeedsInput`], which the handler returns (`?`) to have it asked.
    pub fn ask(&self, key: &str, request: InputRequest) -> Result<Value, ToolError> {
        self.ask_all([(key, request)])
            .map(|mut answers| answers.remove(0))
    }

    /// The answers to several requests asked at once, in order: `Ok` once the client has
    /// answered all of them; until then [`ToolError::NeedsInput`] with those still missing, so
    /// the client is asked them together.
    pub fn ask_all<'k>(
        &self,
        requests: impl IntoIterator<Item = (&'k str, InputRequest)>,
    ) -> Result<Vec<Value>, ToolError> {
        let mut answers = Vec::new();
        let mut missing = Map::new();
        for (key, request) in requests {
            match self.answer(key) {
                Some(answer) => answers.push(answer.clone()),
                None => {
                    missing.insert(key.to_owned(), request.to_json());
                }
            }
        }
        if missing.is_empty() {
            Ok(answers)
        } else {
            Err(ToolError::NeedsInput(missing))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(asking: Value) -> CallContext {
        CallContext {
            asking,
            ..CallContext::default()
        }
    }

    #[test]
    fn asking_without_an_answer_needs_input_and_with_one_returns_it() {
        let first = context(json!({"responses": {}, "canAsk": ["elicitation.form"]}));
        assert!(first.can_ask(InputKind::Form));
        assert!(!first.can_ask(InputKind::Sampling));
        let Err(ToolError::NeedsInput(requests)) = first.ask_all([
            (
                "name",
                InputRequest::form("Who?", json!({"type": "object"})),
            ),
            ("roots", InputRequest::roots()),
        ]) else {
            panic!("no answers yet");
        };
        assert_eq!(requests.len(), 2);
        assert_eq!(requests["name"]["method"], "elicitation/create");
        assert_eq!(requests["name"]["params"]["mode"], "form");
        assert_eq!(requests["roots"]["method"], "roots/list");

        let answered = json!({"action": "accept", "content": {"name": "Ada"}});
        let again = context(json!({"responses": {"name": answered}}));
        assert_eq!(
            again.ask("name", InputRequest::form("Who?", json!({}))),
            Ok(answered)
        );
        // Only the unanswered ones are asked again.
        let Err(ToolError::NeedsInput(requests)) = again.ask_all([
            ("name", InputRequest::form("Who?", json!({}))),
            ("draft", InputRequest::sample("Write it", 50)),
        ]) else {
            panic!("one answer missing");
        };
        assert_eq!(requests.keys().collect::<Vec<_>>(), ["draft"]);
        assert_eq!(InputRequest::sample("x", 5).kind(), InputKind::Sampling);
        assert_eq!(
            InputRequest::url("Pay", "https://p.example", "e1").kind(),
            InputKind::Url
        );
    }

    #[test]
    fn the_confirmation_is_what_the_person_accepted() {
        let confirmed = json!({"action": "accept", "content": {"reference": "R-1"}});
        let told = context(json!({"responses": {CONFIRM_KEY: confirmed}}));
        assert_eq!(told.confirmation(), Some(&json!({"reference": "R-1"})));
        assert_eq!(context(json!({"responses": {}})).confirmation(), None);
        assert_eq!(context(Value::Null).confirmation(), None);
        let declined = json!({"action": "decline"});
        assert_eq!(
            context(json!({"responses": {CONFIRM_KEY: declined}})).confirmation(),
            None
        );
    }

    #[test]
    fn requests_a_host_cannot_ask_are_refused() {
        let ok = json!({"inputRequests": {
            "a": InputRequest::form("Sure?", json!({"type": "object"})).to_json(),
            "b": InputRequest::sample("Say hi", 10).to_json(),
            "c": InputRequest::roots().to_json(),
            "d": InputRequest::url("Go", "https://x.example", "e").to_json(),
        }});
        assert_eq!(check_requests(&ok).unwrap().len(), 4);
        for bad in [
            json!({}),
            json!({"inputRequests": {}}),
            json!({"inputRequests": {"a": {"method": "tools/call", "params": {}}}}),
            json!({"inputRequests": {"a": {"method": "elicitation/create", "params": {}}}}),
            json!({"inputRequests": {"a": {"method": "sampling/createMessage"}}}),
            json!({"inputRequests": {"": InputRequest::roots().to_json()}}),
            json!({"inputRequests": {"turnstile.confirm": InputRequest::roots().to_json()}}),
        ] {
            assert!(check_requests(&bad).is_err(), "{bad}");
        }
    }
}

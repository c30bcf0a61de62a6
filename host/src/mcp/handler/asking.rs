//! Asking the person (issue 40): how a call whose handler needs input (elicitation, sampling,
//! roots; ABI 1.4's `NEEDS_INPUT`, see `turnstile_plugin_abi::asking`) gets it, in whichever era
//! the client speaks.
//!
//! One rule in both eras, SEP-2322's: the handler runs, asks by key, and ends without firing
//! anything; the answers are got; the handler runs again, in a fresh call, with every answer so
//! far. Each run is a whole call through the instance's actor, so the gate is checked again and
//! the event fires by compare-and-set: a move made while a person was thinking wins cleanly, and
//! the late run is refused `FORBIDDEN` before its handler runs. Waiting holds no lock.
//!
//! - **2025 revisions** (a session, or stdio): the host sends the requests to the client itself
//!   (`elicitation/create`, `sampling/createMessage`, `roots/list`), on the call's own stream
//!   (related to the call), waits for the answers within what is left of `--tool-timeout`
//!   since the call began (each run of the handler has the whole of it, as any call does), and
//!   runs the handler again, up to [`MAX_ROUNDS`] times.
//! - **2026-07-28**: servers send no requests of their own. The call returns an input-required
//!   result with the requests and a `requestState`, sealed ([`StateSeal`]) with the answers so
//!   far, the call it belongs to, its principal, the revision of the instance it was made for
//!   and its expiry. The client retries with `inputResponses` and the state; any server holding
//!   the same key takes the retry, while the instance is still at that revision: a state is
//!   good for one step, and refused once the step has moved on (issue 50: replayed after an
//!   operator's reset and a new approval, it would have paid out again unasked). A
//!   `requestState` sent to a tool that asks for nothing is refused too.
//!
//! - **A call running as a task** (2026-07-28's tasks extension; `tasks.rs`): the task shows
//!   the requests (`input_required`) and the call waits, holding no lock, for the client's
//!   answers by `tasks/update` (each key as it comes; the call runs again once all are in), for
//!   at most the task's `ttl`. A cancelled task stops waiting.
//!
//! Only what the client declared it can answer is asked: the handler is told (`canAsk`), and a
//! request past it ends the call `INPUT_UNAVAILABLE` (`reply.rs`), naming what was needed; on
//! 2026-07-28, whose requests each declare the client's capabilities, the request is refused
//! instead as that revision says: JSON-RPC -32021 with the capabilities it needs
//! ([`required_capabilities`]), which the transport answers with HTTP 400.
//!
//! This module owns the era's decision, the capability check, the requests to the client and
//! the sealed state; the callers (`server.rs` for tools, `primitives.rs` for prompts) own the
//! runs.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
#[allow(deprecated)] // Sampling is deprecated in 2026-07-28 (SEP-2577), not in 2025.
use rmcp::model::{CreateMessageRequest, CreateMessageRequestParams};
use rmcp::{
    RoleServer,
    model::{
        ClientCapabilities, ClientResult, ElicitRequest, ElicitRequestParams, InputRequests,
        InputRequiredResult, ServerRequest,
    },
    service::{OriginatingRequestId, PeerRequestOptions, RequestContext},
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::Sha256;

use crate::actors::Revision;
use crate::confirm::{CONFIRM_KEY, fallback_answer};
use crate::mcp::session::request_stream::RequestStream;
use crate::tasks::{Task, Unanswered};

/// The most rounds of asking one call may take in a 2025 session (a handler that asks again
/// after every answer would otherwise hold the request for good).
pub const MAX_ROUNDS: usize = 8;

/// The shortest key `--request-state-key-file` may hold.
pub const MIN_KEY_BYTES: usize = 32;

/// Which era's means reach the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// 2025 revisions: the server sends the requests.
    Requests,
    /// 2026-07-28: an input-required result the client retries.
    InputRequired,
    /// A call running as a task: the task waits for the answers (`tasks/update`).
    Task,
}

impl Era {
    /// The era of `context`'s request.
    pub fn of(context: &RequestContext<RoleServer>) -> Era {
        if running_task(context).is_some() {
            Era::Task
        } else if super::era::is_2026_07_28(context) {
            Era::InputRequired
        } else {
            Era::Requests
        }
    }
}

/// The task `context`'s call runs as, if it runs as one: `mcp/handler/tasks.rs` puts it in the
/// extensions of the context the task's call runs with.
fn running_task(context: &RequestContext<RoleServer>) -> Option<&Arc<Task>> {
    context.extensions.get::<Arc<Task>>()
}

/// The kinds of input a client with `capabilities` can give, as the plugin is told them
/// (`turnstile_plugin_abi::InputKind::as_str`).
pub fn can_ask(capabilities: Option<&ClientCapabilities>) -> Vec<&'static str> {
    let Some(capabilities) = capabilities else {
        return Vec::new();
    };
    let mut kinds = Vec::new();
    if let Some(elicitation) = &capabilities.elicitation {
        // `elicitation: {}` (neither mode named) means form mode, as before modes existed.
        if elicitation.form.is_some() || elicitation.url.is_none() {
            kinds.push("elicitation.form");
        }
        if elicitation.url.is_some() {
            kinds.push("elicitation.url");
        }
    }
    if capabilities.sampling.is_some() {
        kinds.push("sampling");
    }
    if capabilities.roots.is_some() {
        kinds.push("roots");
    }
    kinds
}

/// The kind a request asks for, as [`can_ask`] names it.
pub(in crate::mcp) fn kind_of(request: &Value) -> &'static str {
    match request["method"].as_str() {
        Some("sampling/createMessage") => "sampling",
        Some("roots/list") => "roots",
        _ if request["params"]["mode"] == "url" => "elicitation.url",
        _ => "elicitation.form",
    }
}

/// The client capabilities `requests` need, as a MissingRequiredClientCapabilityError names
/// them (`{"sampling": {}}`, `{"elicitation": {"form": {}}}`...).
#[allow(deprecated)] // Sampling and roots are deprecated in 2026-07-28 (SEP-2577), still asked.
pub fn required_capabilities(requests: &Map<String, Value>) -> ClientCapabilities {
    let mut required = ClientCapabilities::default();
    for request in requests.values() {
        match kind_of(request) {
            "sampling" => required.sampling = Some(Default::default()),
            "roots" => required.roots = Some(Default::default()),
            "elicitation.url" => {
                required.elicitation.get_or_insert_default().url = Some(Default::default());
            }
            _ => required.elicitation.get_or_insert_default().form = Some(Default::default()),
        }
    }
    required
}

/// The requests among `requests` the client cannot answer.
pub fn unanswerable(requests: &Map<String, Value>, can: &[&str]) -> Map<String, Value> {
    requests
        .iter()
        .filter(|(_, request)| !can.contains(&kind_of(request)))
        .map(|(key, request)| (key.clone(), request.clone()))
        .collect()
}

/// What one call knows of its asking: what the client can answer and the answers so far.
#[derive(Debug, Clone)]
pub struct Asking {
    pub era: Era,
    can: Vec<&'static str>,
    responses: Map<String, Value>,
    rounds: usize,
    /// The call, as its sealed states name it.
    call: CallIdentity,
    /// A confirmation (`confirm.rs`) the client cannot show counts as given
    /// (`--confirm-fallback allow`).
    confirm_fallback: bool,
    /// The revision of the instance the answers are given for: the one the last round of
    /// asking was made at (the actor's outcome, or a sealed state). `None` before anything was
    /// asked about an instance, and for a tool of no workflow.
    made_for: Option<Revision>,
    /// `made_for` is the one a sealed state the request brought named (or, when `None`, the
    /// state named none); false once this request asked again itself.
    from_state: bool,
}

/// What comes of a handler's request for input.
#[derive(Debug)]
pub enum Next {
    /// The answers are in: run the handler again ([`Asking::plugin_view`] has them).
    RunAgain,
    /// 2026-07-28: the client must retry with answers; this is the call's result.
    InputRequired(InputRequiredResult),
    /// The client cannot answer these (it did not declare the capability): `reply::needed`.
    Unavailable(Map<String, Value>),
    /// 2026-07-28: the request did not declare the capabilities these need, so it is refused
    /// -32021 naming them ([`required_capabilities`]). (A task's client is told as a 2025
    /// session is, `Unavailable`: its task exists already, and ends with the call's result.)
    Undeclared(Map<String, Value>),
    /// The client failed to answer (an error, or no answer in time), or the call asked too
    /// many times: why.
    Failed(String),
    /// The client cancelled the call while it waited.
    Cancelled,
    /// The request is handed to rmcp, to be served from the start where requests to the client
    /// can be sent (`direct.rs`); what the call answers here is dropped.
    Rerouted,
}

/// Why a request's `inputResponses` or `requestState` cannot be used: what is wrong, which
/// `reply` words as the JSON-RPC error (invalid params) the request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    /// Sent on a revision before 2026-07-28, where the server asks the client itself.
    OtherRevision,
    /// The answer under this key of `inputResponses` is not an object.
    NotAnObject(String),
    /// The `requestState` cannot be used, and why: it is not this deployment's (or was
    /// changed), has expired, was issued to another principal or for another call, was made
    /// for a step of the instance that has moved on, or was sent to a tool that asks nothing.
    State(&'static str),
}

/// Why a `requestState` made for a step the instance has moved on from is refused.
pub const MOVED_ON: &str = "was made for a step of the instance that has moved on";

/// Why a `requestState` sent to a tool that asks for nothing is refused.
pub const NOTHING_ASKED: &str = "was sent to a tool that asks for nothing";

/// Why a `requestState` that names no step of an instance is refused for a call about one.
pub const NO_STEP: &str = "names no step of the instance";

impl Asking {
    /// The asking of a new call of `context`'s request: in the 2026 era, from the request's
    /// `inputResponses` and `requestState` (checked against `call`: [`Unusable`] when it was
    /// tampered with, has expired, or was issued for another call or principal).
    pub fn start(
        context: &RequestContext<RoleServer>,
        seal: &StateSeal,
        call: CallIdentity,
        input_responses: Option<BTreeMap<String, Value>>,
        request_state: Option<&str>,
        confirm_fallback: bool,
    ) -> Result<Asking, Unusable> {
        let era = Era::of(context);
        if era == Era::Requests && (request_state.is_some() || input_responses.is_some()) {
            return Err(Unusable::OtherRevision);
        }
        let Opened {
            mut responses,
            asked,
            made_for,
        } = match request_state {
            Some(state) => seal.open(state, &call)?,
            None => Opened::default(),
        };
        for (key, answer) in input_responses.unwrap_or_default() {
            // A confirmation counts only as the answer to the host's own question, asked in
            // the round the state seals: never one the client offers unasked.
            if key == CONFIRM_KEY && !asked.iter().any(|asked| asked == CONFIRM_KEY) {
                continue;
            }
            if !answer.is_object() {
                return Err(Unusable::NotAnObject(key));
            }
            responses.insert(key, answer);
        }
        Ok(Asking {
            era,
            can: can_ask(context.client_capabilities().as_ref()),
            responses,
            rounds: 0,
            call,
            confirm_fallback,
            made_for,
            from_state: request_state.is_some(),
        })
    }

    /// The revision of the instance the answers so far were given for ([`Asking`]'s
    /// `made_for`).
    pub fn made_for(&self) -> Option<Revision> {
        self.made_for
    }

    /// Whether the request came with a `requestState` that names no revision of an instance:
    /// one sealed for a tool of no workflow, or by a server from before revisions were sealed.
    /// A call about an instance refuses it ([`NO_STEP`]): what it answered cannot be told to be
    /// of the instance's current step.
    pub fn unpinned_state(&self) -> bool {
        self.from_state && self.made_for.is_none()
    }

    /// Whether the answers are those of a sealed state the request brought (not of a round
    /// asked within this request): a refusal of them is the state's ([`MOVED_ON`]).
    pub fn answers_sealed(&self) -> bool {
        self.from_state
    }

    /// The handler asked again at `revision` of its instance: the answers to come are for it.
    pub fn asked_at(&mut self, revision: Revision) {
        self.made_for = Some(revision);
        self.from_state = false;
    }

    /// Whether the client can answer every one of `requests` (it declared what they need).
    pub fn can_answer(&self, requests: &Map<String, Value>) -> bool {
        unanswerable(requests, &self.can).is_empty()
    }

    /// What the plugin is told (ABI 1.4 `asking_json`): what it may ask and what it was told.
    pub fn plugin_view(&self) -> Value {
        json!({"canAsk": self.can, "responses": self.responses})
    }

    /// The handler asked for `requests`: get the answers (2025: from the client, now) or say
    /// what the call answers instead.
    pub async fn next(
        &mut self,
        mut requests: Map<String, Value>,
        context: &RequestContext<RoleServer>,
        seal: &StateSeal,
        deadline: Instant,
    ) -> Next {
        let mut unanswerable = unanswerable(&requests, &self.can);
        if self.confirm_fallback && unanswerable.remove(CONFIRM_KEY).is_some() {
            // Dangerous by the operator's choice: the step runs without a person.
            tracing::info!(tool = %self.call.name, "confirmed without a person: the client cannot show a form (--confirm-fallback allow)");
            // What the audit trail keeps as "confirmed": that nobody did.
            self.responses
                .insert(CONFIRM_KEY.to_owned(), fallback_answer());
            requests.remove(CONFIRM_KEY);
            if requests.is_empty() {
                return Next::RunAgain;
            }
        }
        if !unanswerable.is_empty() {
            return if self.era == Era::InputRequired {
                Next::Undeclared(unanswerable)
            } else {
                Next::Unavailable(unanswerable)
            };
        }
        self.rounds += 1;
        if self.rounds > MAX_ROUNDS {
            return Next::Failed(format!(
                "the tool asked for input more than {MAX_ROUNDS} times in one call"
            ));
        }
        match self.era {
            Era::InputRequired => {
                let input_requests = match described(requests) {
                    Ok(requests) => requests,
                    Err(why) => return Next::Failed(why),
                };
                let asked: Vec<String> = input_requests.keys().cloned().collect();
                let state = seal.seal(&self.call, &self.responses, asked, self.made_for);
                Next::InputRequired(InputRequiredResult::new(Some(input_requests), Some(state)))
            }
            Era::Task => {
                let Some(task) = running_task(context) else {
                    return Next::Failed("its task is gone".to_owned());
                };
                // Checked now, as the input-required result checks them: `tasks/get` shows them.
                if let Err(why) = described(requests.clone()) {
                    return Next::Failed(why);
                }
                let answers = tokio::select! {
                    answers = task.ask(requests) => answers,
                    () = context.ct.cancelled() => return Next::Cancelled,
                };
                match answers {
                    Ok(answers) => {
                        // `tasks/update` took only objects (`reply::unusable_answers`).
                        self.responses.extend(answers);
                        Next::RunAgain
                    }
                    Err(Unanswered::Ended) => Next::Cancelled,
                    Err(Unanswered::TimedOut) => {
                        Next::Failed("no answer came within the task's ttl".to_owned())
                    }
                    Err(Unanswered::KeyReused(key)) => Next::Failed(format!(
                        "it asked again under the key {key:?}, which a task asks under once"
                    )),
                }
            }
            Era::Requests => {
                if Instant::now() >= deadline {
                    return Next::Failed(
                        "the call's --tool-timeout ran out before its input could be asked for"
                            .to_owned(),
                    );
                }
                if let Some(stream) = context.extensions.get::<RequestStream>() {
                    return if stream.reroute() {
                        Next::Rerouted
                    } else {
                        Next::Failed(
                            "it asked for input after it had said something on this request's \
                             stream (or after a plugin reload made it ask), where requests to the \
                             client cannot follow; a client that asks for progress is served \
                             where they can"
                                .to_owned(),
                        )
                    };
                }
                let asked = requests.into_iter().map(|(key, request)| async move {
                    let answer = ask_client(context, &request, deadline).await;
                    (key, answer)
                });
                let answering = futures_util::future::join_all(asked);
                let answers = tokio::select! {
                    answers = answering => answers,
                    () = context.ct.cancelled() => return Next::Cancelled,
                };
                for (key, answer) in answers {
                    match answer {
                        Ok(answer) => {
                            self.responses.insert(key, answer);
                        }
                        Err(why) => return Next::Failed(why),
                    }
                }
                Next::RunAgain
            }
        }
    }
}

/// `requests` as MCP describes them (SEP-2322's `inputRequests`), or why they are not.
fn described(requests: Map<String, Value>) -> Result<InputRequests, String> {
    serde_json::from_value(Value::Object(requests))
        .map_err(|error| format!("its request for input is not one MCP describes: {error}"))
}

/// Sends `request` (`{"method", "params"}`, checked by the plugin layer) to the client of
/// `context`, related to its request, and waits for the answer until `deadline`.
#[allow(deprecated)] // Sampling and roots are deprecated in 2026-07-28 (SEP-2577), not in 2025.
async fn ask_client(
    context: &RequestContext<RoleServer>,
    request: &Value,
    deadline: Instant,
) -> Result<Value, String> {
    let params = request["params"].clone();
    let method = request["method"].as_str().unwrap_or_default();
    let unusable = |error: serde_json::Error| format!("its {method} request is unusable: {error}");
    let mut outgoing = match method {
        "sampling/createMessage" => {
            let params: CreateMessageRequestParams =
                serde_json::from_value(params).map_err(unusable)?;
            ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params))
        }
        "roots/list" => ServerRequest::ListRootsRequest(Default::default()),
        _ => {
            let mut params = params;
            if params.get("mode").is_none() {
                params["mode"] = json!("form");
            }
            let params: ElicitRequestParams = serde_json::from_value(params).map_err(unusable)?;
            ServerRequest::ElicitRequest(ElicitRequest::new(params))
        }
    };
    // On the call's own stream, as MCP asks of a request made for a request.
    let related = OriginatingRequestId(context.id.clone());
    match &mut outgoing {
        ServerRequest::CreateMessageRequest(request) => request.extensions.insert(related),
        ServerRequest::ListRootsRequest(request) => request.extensions.insert(related),
        ServerRequest::ElicitRequest(request) => request.extensions.insert(related),
        _ => None,
    };
    let timeout = deadline.saturating_duration_since(Instant::now());
    let options = PeerRequestOptions::with_timeout(timeout.max(Duration::from_millis(1)));
    let answered = match context
        .peer
        .send_request_with_option(outgoing, options)
        .await
    {
        Ok(handle) => handle.await_response().await,
        Err(error) => Err(error),
    };
    let answer =
        answered.map_err(|error| format!("the client did not answer {method}: {error}"))?;
    let answer = match answer {
        ClientResult::CreateMessageResult(result) => serde_json::to_value(result),
        ClientResult::ListRootsResult(result) => serde_json::to_value(result),
        ClientResult::ElicitResult(result) => serde_json::to_value(result),
        other => {
            return Err(format!(
                "the client answered {method} with something else: {other:?}"
            ));
        }
    };
    answer.map_err(|error| format!("the client's answer to {method} is unusable: {error}"))
}

/// What a sealed state is bound to: the request it was issued for, and by whom.
#[derive(Debug, Clone)]
pub struct CallIdentity {
    /// `tools/call` or `prompts/get`.
    pub method: &'static str,
    /// The tool's or prompt's name.
    pub name: String,
    /// A digest of the arguments (the handle among them).
    pub arguments: String,
    /// The principal, with authentication on; empty without.
    pub principal: String,
}

impl CallIdentity {
    /// The call of `method` `name` with `arguments` (in any key order) by `principal`, about
    /// the instance its `_meta` names, if it names one there (`handle`).
    pub fn new(
        method: &'static str,
        name: &str,
        arguments: &Map<String, Value>,
        handle: Option<&Value>,
        principal: Option<&str>,
    ) -> Self {
        let named = json!({"arguments": arguments, "handle": handle});
        CallIdentity {
            method,
            name: name.to_owned(),
            arguments: crate::actors::arguments_digest(&named),
            principal: principal.unwrap_or_default().to_owned(),
        }
    }
}

/// The body of a sealed `requestState`.
#[derive(Debug, Serialize, Deserialize)]
struct StateBody {
    /// The method and name it was issued for.
    m: String,
    n: String,
    /// The digest of the arguments ([`CallIdentity::arguments`]).
    a: String,
    /// The principal ("" without authentication).
    p: String,
    /// The answers given in earlier rounds.
    r: Map<String, Value>,
    /// The keys this round asks.
    #[serde(default)]
    q: Vec<String>,
    /// The revision of the instance the round asked at (`None`: a tool of no workflow, or a
    /// prompt).
    #[serde(default)]
    s: Option<Revision>,
    /// When it stops being honoured, in unix milliseconds.
    e: u64,
    /// Random, so that no two states are alike (a round's state is never the last one's).
    x: String,
}

/// Seals and opens `requestState`s: HMAC-SHA256 under a key every server of a deployment
/// shares (`--request-state-key-file`), so any of them takes the retry.
///
/// A state is `v1.<body>.<tag>`, both parts base64url: the body is JSON, readable by anyone who
/// holds the state (it holds the answers the client gave, nothing of the server's), and the tag
/// proves this deployment issued it, unchanged.
pub struct StateSeal {
    key: Vec<u8>,
    ttl: Duration,
}

impl std::fmt::Debug for StateSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSeal")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl StateSeal {
    /// A seal under `key` (at least [`MIN_KEY_BYTES`]), honouring states for `ttl`.
    pub fn new(key: Vec<u8>, ttl: Duration) -> Result<Self, String> {
        if key.len() < MIN_KEY_BYTES {
            return Err(format!(
                "the request-state key is {} bytes; it needs at least {MIN_KEY_BYTES}",
                key.len()
            ));
        }
        Ok(StateSeal { key, ttl })
    }

    /// A seal under a random key of this process: states it seals are honoured by it alone.
    pub fn random(ttl: Duration) -> Self {
        let key: [u8; 32] = rand::random();
        StateSeal {
            key: key.to_vec(),
            ttl,
        }
    }

    fn tag(&self, body: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(b"turnstile request state v1.");
        mac.update(body.as_bytes());
        mac
    }

    /// The state of `call` holding `responses`, asking `asked` of the instance at `made_for`.
    pub fn seal(
        &self,
        call: &CallIdentity,
        responses: &Map<String, Value>,
        asked: Vec<String>,
        made_for: Option<Revision>,
    ) -> String {
        let nonce: [u8; 12] = rand::random();
        let body = StateBody {
            m: call.method.to_owned(),
            n: call.name.clone(),
            a: call.arguments.clone(),
            p: call.principal.clone(),
            r: responses.clone(),
            q: asked,
            s: made_for,
            e: crate::store::now_ms().saturating_add(self.ttl.as_millis() as u64),
            x: URL_SAFE_NO_PAD.encode(nonce),
        };
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&body).unwrap_or_default());
        let tag = URL_SAFE_NO_PAD.encode(self.tag(&body).finalize().into_bytes());
        format!("v1.{body}.{tag}")
    }

    /// What `state` holds, if this deployment sealed it for `call` and it has not expired; else
    /// why not ([`Unusable::State`]).
    pub fn open(&self, state: &str, call: &CallIdentity) -> Result<Opened, Unusable> {
        let Some((body, tag)) = state
            .strip_prefix("v1.")
            .and_then(|rest| rest.split_once('.'))
        else {
            return Err(Unusable::State("integrity check failed"));
        };
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| Unusable::State("integrity check failed"))?;
        self.tag(body)
            .verify_slice(&tag)
            .map_err(|_| Unusable::State("integrity check failed"))?;
        let body: StateBody = URL_SAFE_NO_PAD
            .decode(body)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or(Unusable::State("integrity check failed"))?;
        if body.e < crate::store::now_ms() {
            return Err(Unusable::State("has expired"));
        }
        if body.p != call.principal {
            return Err(Unusable::State("was issued to another principal"));
        }
        if body.m != call.method || body.n != call.name || body.a != call.arguments {
            return Err(Unusable::State("was issued for another call"));
        }
        Ok(Opened {
            responses: body.r,
            asked: body.q,
            made_for: body.s,
        })
    }
}

/// What an opened `requestState` holds.
#[derive(Debug, Default, PartialEq)]
pub struct Opened {
    /// The answers given in earlier rounds.
    pub responses: Map<String, Value>,
    /// The keys its round asked.
    pub asked: Vec<String>,
    /// The revision of the instance its round asked at.
    pub made_for: Option<Revision>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call_on(handle: &str, principal: &str) -> CallIdentity {
        let arguments = json!({"note": "x"}).as_object().unwrap().clone();
        let handle = json!(handle);
        CallIdentity::new(
            "tools/call",
            "invoice.discharge",
            &arguments,
            Some(&handle),
            Some(principal),
        )
    }

    fn call(principal: &str) -> CallIdentity {
        call_on("h", principal)
    }

    #[test]
    fn a_sealed_state_opens_for_its_call_alone() {
        let seal = StateSeal::new(vec![7; 32], Duration::from_secs(60)).unwrap();
        let answers: Map<String, Value> = json!({"confirm": {"action": "accept"}})
            .as_object()
            .unwrap()
            .clone();
        let asked = vec!["confirm".to_owned()];
        let at = Some(Revision {
            version: 3,
            at_ms: 1_700_000_000_000,
        });
        let state = seal.seal(&call("alice"), &answers, asked.clone(), at);
        assert_eq!(
            seal.open(&state, &call("alice")).unwrap(),
            Opened {
                responses: answers.clone(),
                asked: asked.clone(),
                made_for: at
            }
        );
        assert_ne!(
            state,
            seal.seal(&call("alice"), &answers, asked.clone(), at),
            "never twice the same"
        );
        let reason = |result: Result<Opened, Unusable>| match result.unwrap_err() {
            Unusable::State(why) => why,
            other => panic!("not a refused state: {other:?}"),
        };
        assert_eq!(
            reason(seal.open(&state, &call("bob"))),
            "was issued to another principal"
        );
        // Another instance (a handle in `_meta`), the same arguments: another call.
        assert_eq!(
            reason(seal.open(&state, &call_on("g", "alice"))),
            "was issued for another call"
        );
        // The same arguments in another key order: the same call.
        let reordered = json!({"b": 2, "a": 1}).as_object().unwrap().clone();
        let ordered = json!({"a": 1, "b": 2}).as_object().unwrap().clone();
        let identity = |arguments| CallIdentity::new("tools/call", "t", arguments, None, None);
        assert_eq!(identity(&reordered).arguments, identity(&ordered).arguments);
        let tampered = format!("{state}-TAMPERED");
        assert_eq!(
            reason(seal.open(&tampered, &call("alice"))),
            "integrity check failed"
        );
        let (body, tag) = state.rsplit_once('.').unwrap();
        let mut flipped = body.as_bytes().to_vec();
        flipped[10] ^= 1;
        let forged = format!("{}.{tag}", String::from_utf8(flipped).unwrap());
        assert_eq!(
            reason(seal.open(&forged, &call("alice"))),
            "integrity check failed"
        );
        // Another deployment's key, and an expired state.
        let theirs = StateSeal::new(vec![8; 32], Duration::from_secs(60)).unwrap();
        assert_eq!(
            reason(theirs.open(&state, &call("alice"))),
            "integrity check failed"
        );
        let short = StateSeal::new(vec![7; 32], Duration::ZERO).unwrap();
        let stale = short.seal(&call("alice"), &answers, asked, None);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(reason(short.open(&stale, &call("alice"))), "has expired");
        assert!(StateSeal::new(vec![1; 31], Duration::ZERO).is_err());
    }

    #[test]
    fn only_declared_kinds_are_asked() {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {}, "sampling": {}})).unwrap();
        let can = can_ask(Some(&capabilities));
        assert_eq!(can, ["elicitation.form", "sampling"]);
        let requests = json!({
            "a": {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {}}},
            "b": {"method": "roots/list"},
            "c": {"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}},
        });
        let missing = unanswerable(requests.as_object().unwrap(), &can);
        assert_eq!(missing.keys().collect::<Vec<_>>(), ["b", "c"]);
        assert!(can_ask(None).is_empty());
        // What a 2026-07-28 request is refused for lacking: a ClientCapabilities object.
        assert_eq!(
            serde_json::to_value(required_capabilities(&missing)).unwrap(),
            json!({"roots": {}, "elicitation": {"url": {}}})
        );
        let all = required_capabilities(requests.as_object().unwrap());
        assert!(can_ask(Some(&all)).contains(&"elicitation.form"));
        let sampling =
            json!({"s": {"method": "sampling/createMessage", "params": {"messages": []}}});
        assert_eq!(
            serde_json::to_value(required_capabilities(sampling.as_object().unwrap())).unwrap(),
            json!({"sampling": {}})
        );
    }
}

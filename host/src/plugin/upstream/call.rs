//! One tool call sent upstream: what it carries, how long it may take, and what its answer means
//! to the host.
//!
//! The upstream is told which instance the call is for (`_meta["dev.turnstile/instance"]`) and
//! the call's idempotency key (`_meta["dev.turnstile/idempotencyKey"]`, the same for every run of
//! one attempt), so an upstream that keeps its own data can key it by instance and act once.
//! Its answer becomes a [`PluginOutput`] as a library's would: `isError` a tool error (which
//! fires the binding's `on_error`), anything else a success. A call that could not be sent, or got
//! no answer, is a [`Failure`]: which of the two decides what the caller may be told.

use std::{sync::Arc, time::Duration};

use serde_json::{Map, Value, json};
use turnstile_plugin_abi::{CallContext, PrimitiveKind};

use super::{
    asking::Asking,
    link::{CallFailed, InFlight},
    sessions::{Held, NoLink, Sessions},
};
use crate::plugin::{HostCall, PluginOutput};

/// The key of a result's own content blocks in a plugin's output (the plugin contract's, as
/// `catalog::CONTENT_KEY` reads it).
const CONTENT_KEY: &str = "_content";

/// How long a call waits for a per-instance session to come free before it is refused.
const SESSION_WAIT: Duration = Duration::from_secs(10);

/// Why a call got no answer from the upstream.
#[derive(Debug)]
pub enum Failure {
    /// It never reached the upstream: nothing ran there.
    Unreachable(String),
    /// It was sent and got no answer: it may have run there.
    NoAnswer(String),
    /// No session was free for it: nothing ran.
    Busy(String),
}

/// What one call needs to know of its upstream.
pub struct Target<'a> {
    pub sessions: &'a Arc<Sessions>,
    /// The workflow the upstream's bound tools belong to.
    pub workflow: &'a str,
    pub timeout: Duration,
}

/// Calls the upstream's `tool` with `input` for the instance `ctx` describes; `number` tells
/// this call from the others in flight.
pub async fn run(
    target: Target<'_>,
    number: u64,
    tool: &str,
    input: &Value,
    ctx: &CallContext,
    host: Option<Arc<HostCall>>,
) -> Result<PluginOutput, Failure> {
    let held = hold(&target, ctx).await?;
    let cancelled = host.as_ref().map(|host| host.cancellation().clone());
    let call = Arc::new(InFlight {
        asking: Asking::new(&ctx.asking),
        host,
    });
    let registered = held.link.register(number, call.clone());
    let params = json!({
        "name": tool,
        "arguments": match input { Value::Object(_) => input.clone(), _ => json!({}) },
        "_meta": meta(target.workflow, ctx),
    });
    let (link, timeout) = (held.link.clone(), target.timeout);
    let mut answer = Box::pin(async move {
        match tokio::time::timeout(timeout, link.call_tool(params)).await {
            Ok(answer) => answer,
            Err(_) => Err(CallFailed::NoAnswer(format!(
                "no answer within {}s (call_timeout_s)",
                timeout.as_secs()
            ))),
        }
    });
    let cancelled = async {
        match cancelled {
            Some(cancelled) => cancelled.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let step = tokio::select! {
        biased;
        () = call.asking.stopped() => Step::Ask,
        () = cancelled => Step::Cancelled,
        answer = &mut answer => Step::Answered(answer),
    };
    match step {
        Step::Ask => {
            // The upstream was told no and finishes this run on its own; it is not cancelled
            // while it takes that answer in (an SDK server cancelled in the middle of its own
            // request can end: the Python SDK 1.30 did). Its answer is not wanted: the call
            // runs again with the person's.
            tokio::spawn(async move {
                let _ = answer.await;
                drop((registered, held));
            });
            Ok(PluginOutput::NeedsInput(
                call.asking.needed().unwrap_or_default(),
            ))
        }
        Step::Cancelled => Err(Failure::NoAnswer(
            "the call was cancelled while the upstream ran it".into(),
        )),
        Step::Answered(Ok(result)) => Ok(output_of(result)),
        Step::Answered(Err(CallFailed::NotSent(reason))) => Err(Failure::Unreachable(reason)),
        Step::Answered(Err(CallFailed::NoAnswer(reason))) => Err(Failure::NoAnswer(reason)),
    }
}

/// How a call's wait ended.
enum Step {
    /// The upstream asked something the host must put to the person first.
    Ask,
    /// The client cancelled, or the host's deadline passed: the upstream call is cancelled.
    Cancelled,
    Answered(Result<Value, CallFailed>),
}

/// The link for the instance `ctx` describes, or why there is none.
async fn hold(target: &Target<'_>, ctx: &CallContext) -> Result<Held, Failure> {
    target
        .sessions
        .hold(&ctx.handle, SESSION_WAIT)
        .await
        .map_err(|no| match no {
            NoLink::Unreachable(reason) => Failure::Unreachable(reason),
            NoLink::Busy(reason) => Failure::Busy(reason),
        })
}

/// Reads a prompt (`prompts/get`) or resource (`resources/read`) upstream with `params`, for
/// the instance `ctx` describes: the upstream's answer is already in the shape a library's
/// `read` gives (`{"description", "messages"}`, `{"contents"}`). An error the upstream answers is
/// a failure here, as a library's broken read is.
pub async fn read(
    target: Target<'_>,
    kind: PrimitiveKind,
    mut params: Value,
    ctx: &CallContext,
) -> Result<PluginOutput, Failure> {
    let held = hold(&target, ctx).await?;
    params["_meta"] = meta(target.workflow, ctx);
    let asking = async {
        match kind {
            PrimitiveKind::Prompt => held.link.get_prompt(params).await,
            PrimitiveKind::Resource => held.link.read_resource(params).await,
        }
    };
    match tokio::time::timeout(target.timeout, asking).await {
        Ok(Ok(mut answer)) => {
            if let Value::Object(answer) = &mut answer {
                answer.remove("_meta");
            }
            Ok(PluginOutput::success(answer))
        }
        Ok(Err(CallFailed::NotSent(reason))) => Err(Failure::Unreachable(reason)),
        Ok(Err(CallFailed::NoAnswer(reason))) => Err(Failure::NoAnswer(reason)),
        Err(_) => Err(Failure::NoAnswer(format!(
            "no answer within {}s (call_timeout_s)",
            target.timeout.as_secs()
        ))),
    }
}

/// The `_meta` a call carries.
fn meta(workflow: &str, ctx: &CallContext) -> Value {
    let mut meta = Map::new();
    // A tool bound to no workflow runs on no instance.
    if !ctx.state.is_null() {
        let mut instance = json!({"workflow": workflow, "state": ctx.state});
        if !ctx.handle.is_empty() {
            instance["handle"] = json!(ctx.handle);
        }
        meta.insert("dev.turnstile/instance".into(), instance);
    }
    if !ctx.idempotency_key.is_empty() {
        meta.insert(
            "dev.turnstile/idempotencyKey".into(),
            json!(ctx.idempotency_key),
        );
    }
    Value::Object(meta)
}

/// The host's view of the upstream's `CallToolResult` (as JSON).
fn output_of(mut result: Value) -> PluginOutput {
    let content = result
        .get_mut("content")
        .map(Value::take)
        .unwrap_or_else(|| json!([]));
    if result.get("isError") == Some(&Value::Bool(true)) {
        let text: Vec<&str> = content
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect();
        let message = if text.is_empty() {
            "the upstream answered an error without text".to_owned()
        } else {
            text.join("\n")
        };
        return PluginOutput::ToolError(message);
    }
    match result.get_mut("structuredContent").map(Value::take) {
        // The structured result is what a workflow's guards and assignments read; the upstream's
        // text blocks are its rendering of the same (MCP asks servers to send both).
        Some(structured @ Value::Object(_)) => PluginOutput::success(structured),
        _ => PluginOutput::success(json!({ CONTENT_KEY: content })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_answer_is_a_tool_error_with_its_text() {
        let output = output_of(json!({
            "isError": true,
            "content": [{"type": "text", "text": "the desk refused"}],
        }));
        assert_eq!(output, PluginOutput::ToolError("the desk refused".into()));
    }

    #[test]
    fn structured_content_is_the_value_and_plain_content_is_kept_as_blocks() {
        let output = output_of(json!({
            "content": [{"type": "text", "text": "{\"ticket\":1}"}],
            "structuredContent": {"ticket": 1},
        }));
        assert_eq!(output, PluginOutput::success(json!({"ticket": 1})));
        let output = output_of(json!({"content": [{"type": "text", "text": "done"}]}));
        assert_eq!(
            output,
            PluginOutput::success(json!({"_content": [{"type": "text", "text": "done"}]}))
        );
    }

    #[test]
    fn the_meta_names_the_instance_and_the_attempt() {
        let ctx = CallContext {
            handle: "h1".into(),
            state: json!("open"),
            idempotency_key: "k".into(),
            ..CallContext::default()
        };
        assert_eq!(
            meta("desk", &ctx),
            json!({
                "dev.turnstile/instance": {"workflow": "desk", "state": "open", "handle": "h1"},
                "dev.turnstile/idempotencyKey": "k",
            })
        );
    }
}

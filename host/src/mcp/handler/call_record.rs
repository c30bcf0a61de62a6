//! The record of one `tools/call`, from the handler's start to its answer.
//!
//! [`CallRecord`] opens the call's `tracing` span once the instance is known (tool, instance,
//! and the outcome when the line that shows it is logged; with traces exported, `logs::otlp`,
//! also the workflow and the outcome always, continuing the client's `traceparent`, while the
//! instance's actor records `from` and `to`) and, once answered, counts the call
//! under its tool and outcome (`crate::metrics::CallMetrics`). The outcome is read back from the
//! answer itself, so it is what the client saw.
//!
//! It must not build client-visible results (that is `reply`) or name metric series itself.

use std::{
    sync::{Arc, OnceLock},
    time::Instant,
};

use rmcp::{ErrorData, model::CallToolResponse};
use tracing::field;

use crate::{
    actors::InstanceKey,
    catalog::ToolEntry,
    logs::otlp,
    metrics::{self, CallMetrics},
};

/// One `tools/call` being answered.
pub struct CallRecord {
    /// The catalog's tool, or none for a name it does not hold: counted as
    /// [`metrics::UNKNOWN_TOOL`], never under the raw name a client sent.
    tool: Option<Arc<ToolEntry>>,
    /// Made once the instance is known ([`CallRecord::span`]), so that the log formats its
    /// fields once; none for a call answered before (an unknown tool, bad arguments).
    span: OnceLock<tracing::Span>,
    started: Instant,
}

impl CallRecord {
    /// Starts the record of a call of `tool`, the catalog's entry for the name the client
    /// sent (none if it holds no such tool).
    pub fn start(tool: Option<Arc<ToolEntry>>) -> CallRecord {
        CallRecord {
            tool,
            span: OnceLock::new(),
            started: Instant::now(),
        }
    }

    /// The tool called, if the catalog knows it.
    pub fn tool(&self) -> Option<&Arc<ToolEntry>> {
        self.tool.as_ref()
    }

    /// The name the call is counted and logged under.
    fn tool_name(&self) -> &str {
        self.tool
            .as_ref()
            .map_or(metrics::UNKNOWN_TOOL, |tool| tool.name())
    }

    /// The span the call runs in from here on, naming the instance it is about (`None` for a
    /// tool of no workflow). Made at the first ask; a later one gets the same span.
    ///
    /// The instance is named `<workflow>#<digest>`: a handle and a session id are credentials,
    /// so the span (which a log line or an exporter may carry anywhere) holds a digest of the
    /// instance's key, the same for every call on that instance, and not the key itself.
    ///
    /// With traces exported (`logs::otlp`), the span continues the client's trace when the
    /// call carried a W3C `traceparent`, and names the workflow; the instance's actor records
    /// the state it moved `from` and `to`.
    pub fn span(&self, instance: Option<&InstanceKey>, traceparent: Option<&str>) -> tracing::Span {
        self.span
            .get_or_init(|| {
                let span = self.new_span(instance);
                if otlp::exporting() {
                    if let Some(traceparent) = traceparent {
                        otlp::continue_trace(&span, traceparent);
                    }
                    if let Some(key) = instance {
                        span.record("workflow", &*key.workflow);
                    }
                }
                span
            })
            .clone()
    }

    /// The call's span, not yet entered.
    fn new_span(&self, instance: Option<&InstanceKey>) -> tracing::Span {
        // INFO, so that it is there for an exporting layer and gives context to a
        // warning logged during the call; the log prints spans only around events, so it
        // adds no line of its own. Made with every field it will have at once: a field
        // recorded later is formatted again, appended to a copy grown for it.
        match instance {
            Some(key) => tracing::info_span!(
                target: "turnstile::call",
                "call",
                tool = %self.tool_name(),
                instance = %key.label(),
                workflow = field::Empty,
                from = field::Empty,
                to = field::Empty,
                outcome = field::Empty,
            ),
            None => tracing::info_span!(
                target: "turnstile::call",
                "call",
                tool = %self.tool_name(),
                outcome = field::Empty,
            ),
        }
    }

    /// The call was answered with `answer`: count it in `calls`, close its span, and pass the
    /// answer on.
    pub fn finish(
        self,
        calls: &CallMetrics,
        answer: Result<CallToolResponse, ErrorData>,
    ) -> Result<CallToolResponse, ErrorData> {
        let outcome = outcome(&answer);
        let took = self.started.elapsed();
        // A line per call only for those who ask (`RUST_LOG=info,turnstile::call=debug`), in
        // the call's span without entering it. The outcome is recorded in the span only then:
        // the log, the only layer, shows a span's fields on the lines logged in it, and past
        // this point there is none but this one, so recording it for nothing was a formatted
        // field per call (BENCHMARKS.md's history, sessions 14 and 15); or when spans are exported.
        let logged = tracing::enabled!(target: "turnstile::call", tracing::Level::DEBUG);
        if otlp::exporting() || logged {
            self.span(None, None)
                .record("outcome", field::display(outcome));
        }
        if logged {
            let span = self.span(None, None);
            tracing::debug!(
                target: "turnstile::call",
                parent: &span,
                took_ms = took.as_secs_f64() * 1e3,
                "call answered"
            );
        }
        calls.answered(self.tool_name(), outcome, took);
        answer
    }
}

/// The `outcome` label of an answer: [`metrics::OK`], the error code of an `isError` result, or
/// the JSON-RPC error's name. Error results are built only by `reply`, from a fixed set of codes;
/// anything that does not look like one is counted as `ERROR`, so the set stays bounded.
fn outcome(answer: &Result<CallToolResponse, ErrorData>) -> &str {
    match answer {
        Ok(CallToolResponse::Complete(result)) if result.is_error != Some(true) => metrics::OK,
        Ok(CallToolResponse::Complete(result)) => result
            .structured_content
            .as_ref()
            .and_then(|structured| structured["error"]["code"].as_str())
            .filter(|code| is_error_code(code))
            .unwrap_or("ERROR"),
        Ok(CallToolResponse::InputRequired(_)) => "INPUT_REQUIRED",
        Ok(CallToolResponse::Task(_)) => "TASK",
        // A kind of answer newer than this code: Turnstile builds none of them.
        Ok(_) => "ERROR",
        Err(error) if error.code == rmcp::model::ErrorCode::INVALID_PARAMS => "INVALID_PARAMS",
        Err(_) => "JSONRPC_ERROR",
    }
}

/// Whether `code` has the shape of the host's error codes (`SCREAMING_SNAKE_CASE`, short).
fn is_error_code(code: &str) -> bool {
    (1..=32).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
}

#[cfg(test)]
mod tests {
    use rmcp::model::CallToolResult;
    use serde_json::json;

    use super::*;

    fn complete(result: CallToolResult) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResponse::Complete(result))
    }

    #[test]
    fn the_outcome_is_ok_or_the_results_error_code() {
        assert_eq!(outcome(&complete(CallToolResult::success(vec![]))), "ok");
        let forbidden = CallToolResult::structured_error(json!({"error": {"code": "FORBIDDEN"}}));
        assert_eq!(outcome(&complete(forbidden)), "FORBIDDEN");
        assert_eq!(
            outcome(&Err(ErrorData::invalid_params("unknown tool: x", None))),
            "INVALID_PARAMS"
        );
    }

    #[test]
    fn an_error_result_without_a_code_of_ours_counts_as_error() {
        let odd =
            CallToolResult::structured_error(json!({"error": {"code": "made up by a plugin"}}));
        assert_eq!(outcome(&complete(odd)), "ERROR");
        let bare = CallToolResult::error(vec![]);
        assert_eq!(outcome(&complete(bare)), "ERROR");
    }
}

//! Traces to OpenTelemetry (issue 42, item 3): with `--otlp-endpoint`, the real binary exports
//! each `tools/call` as one `call` span (tool, workflow, instance, from, to, outcome) with its
//! `plugin` and `save` children, continues a client's W3C `traceparent` (in `_meta` or the
//! HTTP header), samples by `--otlp-sample-ratio` (parent-based), and exports a timer firing as
//! a trace of its own.
//!
//! The collector is a small OTLP/HTTP receiver in the test (axum on 127.0.0.1), decoding each
//! `ExportTraceServiceRequest` with `opentelemetry-proto`'s generated types. Spans are waited
//! for with a bounded poll; counts are taken after the server stopped (it sends what is
//! batched on shutdown), never after a sleep.

mod common;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{Client, PluginDir, Server, eventually, handle_of, refused_start};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    common::v1::any_value,
    trace::v1::Span,
};
use prost::Message;
use serde_json::json;

/// The client's trace, as a W3C `traceparent` (sampled).
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

fn traceparent(trace_id: &str, span_id: &str) -> String {
    format!("00-{trace_id}-{span_id}-01")
}

/// An OTLP/HTTP collector on a free loopback port, keeping every span it is sent.
struct Collector {
    endpoint: String,
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the collector");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body)
                        .expect("the server sends ExportTraceServiceRequest protobuf");
                    let mut kept = kept.lock().unwrap();
                    for resource in request.resource_spans {
                        for scope in resource.scope_spans {
                            kept.extend(scope.spans);
                        }
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector { endpoint, spans }
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans named `name` once at least `n` arrived (within 20 s: a bound, not a timing).
    async fn wait_for(&self, name: &str, n: usize) -> Vec<Span> {
        eventually(
            &format!("fewer than {n} `{name}` spans arrived"),
            Duration::from_secs(20),
            Duration::from_millis(50),
            async || {
                let spans = self.spans();
                let named = named(&spans, name);
                if named.len() >= n {
                    Ok(named)
                } else {
                    Err(format!("{} of {n}: {spans:?}", named.len()))
                }
            },
        )
        .await
    }
}

fn named(spans: &[Span], name: &str) -> Vec<Span> {
    spans
        .iter()
        .filter(|span| span.name == name)
        .cloned()
        .collect()
}

/// The string attribute `key` of `span`.
fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|attribute| attribute.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    match value {
        any_value::Value::StringValue(text) => Some(text.clone()),
        other => Some(format!("{other:?}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `call` span of the call of `tool`.
fn call_of(spans: &[Span], tool: &str) -> Vec<Span> {
    named(spans, "call")
        .into_iter()
        .filter(|span| attribute(span, "tool").as_deref() == Some(tool))
        .collect()
}

/// A server exporting to `collector`, logging as an operator's does (default level), so that
/// any WARN or ERROR of normal behaviour would show.
fn exporting_server(plugins: &PluginDir, collector: &Collector, extra: &[&str]) -> Server {
    let flags = [&["--otlp-endpoint", collector.endpoint.as_str()], extra].concat();
    Server::http_logging(plugins.path(), &flags, None)
}

fn assert_quiet(server: &Server) {
    let log = server.stderr();
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "normal behaviour logged a warning or error:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_one_span_with_its_attributes_in_the_clients_trace() {
    let collector = Collector::start().await;
    let plugins = PluginDir::with(&["invoice"]);
    let mut server = exporting_server(&plugins, &collector, &[]);
    let client = Client::http(&server.url).await;

    let submitted = client
        .call_with_meta(
            "invoice.submit",
            json!({"amount": 5}),
            json!({"traceparent": traceparent(TRACE_ID, PARENT_SPAN_ID)}),
        )
        .await;
    assert_ne!(submitted.is_error, Some(true), "{submitted:?}");
    let call = collector.wait_for("call", 1).await.remove(0);
    assert_eq!(attribute(&call, "tool").as_deref(), Some("invoice.submit"));
    assert_eq!(attribute(&call, "workflow").as_deref(), Some("invoice"));
    let instance = attribute(&call, "instance").expect("the instance");
    assert!(instance.starts_with("invoice#"), "{instance}");
    assert_eq!(attribute(&call, "from").as_deref(), Some("draft"));
    assert_eq!(attribute(&call, "to").as_deref(), Some("review"));
    assert_eq!(attribute(&call, "outcome").as_deref(), Some("ok"));
    // The client's trace, its span the parent.
    assert_eq!(hex(&call.trace_id), TRACE_ID);
    assert_eq!(hex(&call.parent_span_id), PARENT_SPAN_ID);

    // The plugin call and the save are the call's children.
    for child in ["plugin", "save"] {
        let span = collector.wait_for(child, 1).await.remove(0);
        assert_eq!(span.trace_id, call.trace_id, "{child}");
        assert_eq!(span.parent_span_id, call.span_id, "{child}");
    }

    // A call without a `traceparent` starts a trace of its own; a refused one is a span too,
    // with its outcome.
    client.call("invoice.status", json!({})).await;
    let refused = client.call("invoice.discharge", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    collector.wait_for("call", 3).await;

    server.stop();
    let spans = collector.spans();
    let calls = named(&spans, "call");
    assert_eq!(calls.len(), 3, "one span per tools/call: {calls:?}");
    let status = &call_of(&spans, "invoice.status")[0];
    assert_ne!(hex(&status.trace_id), TRACE_ID);
    assert!(status.parent_span_id.is_empty());
    assert_eq!(attribute(status, "outcome").as_deref(), Some("ok"));
    assert_eq!(attribute(status, "from").as_deref(), Some("review"));
    assert_eq!(attribute(status, "to").as_deref(), Some("review"));
    let discharge = &call_of(&spans, "invoice.discharge")[0];
    assert_eq!(
        attribute(discharge, "outcome").as_deref(),
        Some("FORBIDDEN")
    );
    // Only the submit saved.
    assert_eq!(named(&spans, "save").len(), 1);
    assert_quiet(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_traceparent_header_is_continued() {
    let collector = Collector::start().await;
    let plugins = PluginDir::with(&["invoice"]);
    let server = exporting_server(&plugins, &collector, &[]);
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let parent = "b7ad6b7169203331";
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        "traceparent",
        traceparent(trace_id, parent).parse().unwrap(),
    );
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    let client = Client::http_through(&server.url, http, None).await;
    client.call("invoice.submit", json!({"amount": 5})).await;
    let call = collector.wait_for("call", 1).await.remove(0);
    assert_eq!(hex(&call.trace_id), trace_id);
    assert_eq!(hex(&call.parent_span_id), parent);
    assert_quiet(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ratio_of_zero_exports_only_the_traces_a_sampled_client_continues() {
    let collector = Collector::start().await;
    let plugins = PluginDir::with(&["invoice"]);
    let mut server = exporting_server(&plugins, &collector, &["--otlp-sample-ratio", "0"]);
    let client = Client::http(&server.url).await;
    client.call("invoice.status", json!({})).await;
    client
        .call_with_meta(
            "invoice.submit",
            json!({"amount": 5}),
            json!({"traceparent": traceparent(TRACE_ID, PARENT_SPAN_ID)}),
        )
        .await;
    collector.wait_for("call", 1).await;
    // Stopped, the server has sent everything it kept.
    server.stop();
    let spans = collector.spans();
    let calls = named(&spans, "call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        attribute(&calls[0], "tool").as_deref(),
        Some("invoice.submit")
    );
    assert!(call_of(&spans, "invoice.status").is_empty());
    assert_quiet(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_firing_is_a_trace_of_its_own() {
    let collector = Collector::start().await;
    let plugins = PluginDir::with(&["invoice"]);
    let flags = [
        "--otlp-endpoint",
        collector.endpoint.as_str(),
        "--state-handle-key",
        "handle",
    ];
    let server = Server::http_with_env(
        plugins.path(),
        &flags,
        &[("TURNSTILE_PLUGIN_INVOICE_REVIEW_DEADLINE_MS", "300")],
    );
    let client = Client::http(&server.url).await;
    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    assert!(!handle.is_empty());
    let fired = collector.wait_for("timers", 1).await;
    let firing = fired
        .iter()
        .find(|span| attribute(span, "to").as_deref() == Some("draft"))
        .unwrap_or_else(|| panic!("no firing back to draft: {fired:?}"));
    assert_eq!(attribute(firing, "workflow").as_deref(), Some("invoice"));
    assert_eq!(attribute(firing, "from").as_deref(), Some("review"));
    assert!(firing.parent_span_id.is_empty(), "a root span");
    let call = collector.wait_for("call", 1).await.remove(0);
    assert_ne!(firing.trace_id, call.trace_id);
    assert_eq!(attribute(firing, "instance"), attribute(&call, "instance"));
}

#[test]
fn a_sample_ratio_outside_zero_to_one_is_refused() {
    let stderr = refused_start(
        &["invoice"],
        &[
            "--otlp-endpoint",
            "http://127.0.0.1:4318",
            "--otlp-sample-ratio",
            "1.5",
        ],
    );
    assert!(stderr.contains("otlp-sample-ratio"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_is_one_warning_not_one_per_export() {
    // A port nothing listens on any more.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let plugins = PluginDir::with(&["invoice"]);
    // Batches every 100 ms (the SDK's variable), so that the calls below are several exports.
    let mut server = Server::http_with_env(
        plugins.path(),
        &["--otlp-endpoint", &endpoint],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    let client = Client::http(&server.url).await;
    for _ in 0..3 {
        let status = client.call("invoice.status", json!({})).await;
        assert_ne!(
            status.is_error,
            Some(true),
            "calls work without the collector"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    server.stop();
    let log = server.stderr();
    let warnings = log
        .lines()
        .filter(|line| line.contains("cannot export traces"))
        .count();
    assert_eq!(warnings, 1, "{log}");
    assert!(!log.contains("ERROR"), "{log}");
}

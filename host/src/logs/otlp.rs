//! Traces to OpenTelemetry (`--otlp-endpoint`): the layer that turns the host's own `tracing`
//! spans into OpenTelemetry spans and exports them over OTLP/HTTP (protobuf), and the few hooks
//! the call path uses to say more only while that layer is installed.
//!
//! What is exported is what the code already says in spans: a `tools/call`'s `call` span
//! (`mcp/handler/call_record.rs`) with its `plugin` and `save` children
//! (`actors/instance/run_call.rs`), and a timer firing's `timers` span
//! (`actors/instance/wake.rs`), a trace of its own. Only spans of `turnstile`'s own targets
//! leave the process: an HTTP client's spans (the exporter's own requests among them) would
//! otherwise be exported in turn.
//!
//! With no endpoint, [`exporting`] is false and nothing here runs: no layer is installed (the
//! subscriber is the log's alone, as without this module), no span is made for the children,
//! no `traceparent` is read.
//!
//! It must not decide what a span holds (the code that opens it does), nor log per span.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use opentelemetry::{
    Context,
    propagation::{Extractor, TextMapPropagator},
    trace::TracerProvider as _,
};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::{
    Resource,
    error::OTelSdkResult,
    propagation::TraceContextPropagator,
    runtime,
    trace::{
        Sampler, SdkTracerProvider, SpanData, SpanExporter,
        span_processor_with_async_runtime::BatchSpanProcessor,
    },
};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{Layer, filter::filter_fn, registry::LookupSpan};

/// Where traces go (`--otlp-endpoint`) and how many (`--otlp-sample-ratio`).
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpOptions {
    /// The collector's base URL (`/v1/traces` is added) or its full traces URL.
    pub endpoint: String,
    /// The share of new traces kept, from 0 to 1; a continued trace keeps its parent's choice.
    pub sample_ratio: f64,
}

/// Set once the exporting layer is installed; read on every call, hence an atomic and not a
/// lookup in the subscriber.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: the call path records what only an exporter would read (a
/// call's `from`, `to` and `outcome`, its children) only then.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The exporter installed by [`layer`]: [`TraceExport::shutdown`] sends what is batched.
pub struct TraceExport {
    provider: SdkTracerProvider,
}

impl TraceExport {
    /// Exports the spans still batched and stops. Blocks until the batch task (on the tokio
    /// runtime, which must still run) is done, or its timeout passed.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the last traces may not have reached the collector");
        }
    }
}

/// The OpenTelemetry layer exporting to `options`' collector. Call inside the tokio runtime
/// the server runs on: the batch task is spawned on it.
pub(super) fn layer<S>(
    options: &OtlpOptions,
) -> anyhow::Result<(impl Layer<S> + use<S>, TraceExport)>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(&options.endpoint))
        .with_timeout(EXPORT_TIMEOUT)
        .build()?;
    let exporter = Reporting {
        inner: exporter,
        failing: AtomicBool::new(false),
    };
    let processor = BatchSpanProcessor::builder(exporter, runtime::Tokio).build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            options.sample_ratio,
        ))))
        .with_resource(Resource::builder().with_service_name("turnstile").build())
        .build();
    let tracer = provider.tracer("turnstile");
    // A per-layer filter, unlike the log's global ones (`logs.rs` says why those are global):
    // its cost is paid only with export on, and it keeps other crates' spans out of the export.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter_fn(|metadata| {
            let target = metadata.target();
            target == "turnstile" || target.starts_with("turnstile::")
        }));
    EXPORTING.store(true, Ordering::Relaxed);
    Ok((layer, TraceExport { provider }))
}

/// How long one export request may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The collector's traces URL: `endpoint` as given when it names `/v1/traces`, else with it
/// added (the collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` is read).
fn traces_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim_end_matches('/');
    if endpoint.ends_with("/v1/traces") {
        endpoint.to_owned()
    } else {
        format!("{endpoint}/v1/traces")
    }
}

/// How a span names an instance's state: a simple state by its name, a compound one as its JSON
/// state value (`{"review":"legal"}`).
pub fn state(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(name) => name.clone(),
        other => other.to_string(),
    }
}

/// Continues the W3C trace `traceparent` names: `span` (not yet entered) becomes a child of the
/// client's span, in its trace. A malformed `traceparent` is ignored (the span starts a trace
/// of its own), as the W3C specification asks. Does nothing without export.
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    if !exporting() {
        return;
    }
    let parent: Context = TraceContextPropagator::new().extract(&TraceParent(traceparent));
    // Fails only for a span the layer does not know (filtered out): nothing to continue then.
    let _ = span.set_parent(parent);
}

/// One `traceparent` value, as the propagator reads headers.
struct TraceParent<'a>(&'a str);

impl Extractor for TraceParent<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

/// The OTLP exporter, saying once in the log that the collector cannot be reached (and once
/// that it can again), instead of nothing or a line per batch.
#[derive(Debug)]
struct Reporting<E> {
    inner: E,
    /// The last export failed: its warning is logged already.
    failing: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for Reporting<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("the OpenTelemetry collector takes traces again");
                }
            }
            Err(error) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %error,
                        "cannot export traces to the OpenTelemetry collector; spans are dropped \
                         until it takes them again"
                    );
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_to_a_base_url_only() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector/otlp/v1/traces"),
            "http://collector/otlp/v1/traces"
        );
    }
}

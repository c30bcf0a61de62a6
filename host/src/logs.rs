//! The server's log: where it goes, in which format, and what it lets through.
//!
//! Lines go to stderr (on stdio, stdout is the protocol), as text or, with `--log-format json`,
//! one JSON object per line for log shippers. `RUST_LOG` filters them (tracing's `EnvFilter`
//! syntax, e.g. `info,turnstile::hotplug=debug`); without it the level is `info`, at which the
//! server logs its own events (start, plugins loaded or refused, store opened, shutdown) and
//! nothing per request.
//!
//! rmcp's own events are its internals: it logs every session's `peer_info`, every notification
//! received, and normal client behaviour (a client closing a stream before its answer, every
//! JSON-RPC error answer) at INFO, WARN and ERROR. They are shown only when `RUST_LOG` enables
//! debug for their target (`RUST_LOG=info,rmcp=debug`), whatever their own level.
//! `tests/metrics.rs` and the Python-client tests fail if any of them reaches the default log.
//!
//! With `--otlp-endpoint`, `serve` adds one more layer (`otlp.rs`), exporting the call spans as
//! OpenTelemetry traces; without it the subscriber is exactly the log's.
//!
//! It must not decide what is logged where events happen; it only routes and filters.

mod fields;
pub mod otlp;

pub use otlp::{OtlpOptions, TraceExport};

use tracing::{Level, Metadata};
use tracing_subscriber::{
    EnvFilter, Layer,
    filter::{Targets, filter_fn},
    layer::SubscriberExt,
    util::SubscriberInitExt,
};

/// How log lines are written (`--log-format`, or `log-format` in a config file).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines: time, level, target, message, fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (with `message`),
    /// and `span`/`spans` when the line was logged during a call.
    Json,
}

/// The filter used when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "info";

/// Installs the process's log subscriber. Call once, first thing.
pub fn init(format: LogFormat) {
    // Without an endpoint nothing can fail.
    let _ = init_serving(format, None);
}

/// [`init`] for `serve`, exporting traces to `otlp`'s collector if given (then call inside the
/// tokio runtime the server runs on, and [`TraceExport::shutdown`] when it is done). An endpoint
/// the exporter cannot use is an error, and no subscriber is installed.
pub fn init_serving(
    format: LogFormat,
    otlp: Option<&OtlpOptions>,
) -> anyhow::Result<Option<TraceExport>> {
    let directives = std::env::var("RUST_LOG").ok();
    let filter = directives
        .as_deref()
        .and_then(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER));
    let verbose = verbose_targets(directives.as_deref());
    let rmcp_only_at_debug = filter_fn(move |metadata| shows(&verbose, metadata));
    let stderr = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .fmt_fields(fields::PlainFields)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    // Global filters, not per-layer ones: with one layer they let through the same lines, and
    // per-layer filters keep a bitmap per span that every span operation consults (the call
    // span's enter, exit and records: 2.9% of a status call's instructions, BENCHMARKS.md's
    // history, sessions 14 and 15).
    let log = tracing_subscriber::registry()
        .with(rmcp_only_at_debug)
        .with(filter)
        .with(stderr);
    match otlp {
        None => {
            log.init();
            Ok(None)
        }
        Some(options) => {
            let (exporting, export) = otlp::layer(options)?;
            log.with(exporting).init();
            Ok(Some(export))
        }
    }
}

/// The targets `RUST_LOG` enables debug for. `Targets` reads the `target=level` part of the
/// syntax; a filter it cannot read (span and field directives) leaves rmcp quiet.
fn verbose_targets(directives: Option<&str>) -> Targets {
    directives
        .and_then(|directives| directives.parse().ok())
        .unwrap_or_default()
}

/// Whether an event or span may be shown at all: anything but rmcp's, and rmcp's only where
/// debug is enabled for its target.
fn shows(verbose: &Targets, metadata: &Metadata<'_>) -> bool {
    let target = metadata.target();
    let is_rmcp = target == "rmcp" || target.starts_with("rmcp::");
    !is_rmcp || verbose.would_enable(target, &Level::DEBUG)
}

#[cfg(test)]
mod tests {
    use tracing::{Level, callsite::Identifier, field::FieldSet, metadata::Kind};

    use super::*;

    struct Callsite;
    impl tracing::callsite::Callsite for Callsite {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!("never registered")
        }
    }
    static CALLSITE: Callsite = Callsite;

    fn event(target: &'static str, level: Level) -> Metadata<'static> {
        Metadata::new(
            "event",
            target,
            level,
            None,
            None,
            None,
            FieldSet::new(&[], Identifier(&CALLSITE)),
            Kind::EVENT,
        )
    }

    #[test]
    fn rmcp_is_shown_only_where_debug_is_enabled_for_it() {
        let default = verbose_targets(None);
        assert!(!shows(&default, &event("rmcp::service", Level::ERROR)));
        assert!(!shows(&default, &event("rmcp", Level::INFO)));
        assert!(shows(&default, &event("turnstile::mcp::http", Level::INFO)));
        assert!(shows(&default, &event("rmcpx", Level::INFO)));

        let rmcp_debug = verbose_targets(Some("info,rmcp=debug"));
        assert!(shows(&rmcp_debug, &event("rmcp::service", Level::INFO)));
        let everything = verbose_targets(Some("debug"));
        assert!(shows(&everything, &event("rmcp::service", Level::WARN)));

        let turnstile_debug = verbose_targets(Some("info,turnstile=debug"));
        assert!(!shows(
            &turnstile_debug,
            &event("rmcp::service", Level::WARN)
        ));
        // EnvFilter's span syntax is beyond `Targets`: rmcp stays quiet rather than guessing.
        let spans = verbose_targets(Some("[call{tool=x}]=debug"));
        assert!(!shows(&spans, &event("rmcp::service", Level::INFO)));
    }
}

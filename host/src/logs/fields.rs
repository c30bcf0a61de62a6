//! [`PlainFields`]: the text log's field writer, `tracing_subscriber`'s default output made
//! with fewer formatting calls.
//!
//! The fmt layer writes a span's fields when the span is made, whether or not a line is ever
//! logged in it, and a call's span is made on every `tools/call`. Its default writer
//! (`DefaultFields`) puts each field through `write!` with three arguments (name, `=`, value,
//! the first two wrapped for ANSI styling even when there is none): 1.4% of a status call's CPU
//! time in a native profile (BENCHMARKS.md's history, session 17). This one writes the name and `=`
//! as plain strings and formats only the value, and writes a string value that needs no
//! escaping without any formatting at all. What it writes is byte for byte what the default
//! writes; whatever it does not handle in that plain way (styled output for a terminal, the
//! `message` field, `r#` names, errors) it hands to the default writer.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::{
    field::{RecordFields, VisitOutput},
    fmt::{
        FormatFields,
        format::{DefaultVisitor, Writer},
    },
};

/// The text log's [`FormatFields`]: `name=value` pairs separated by spaces, as the default.
#[derive(Debug, Default)]
pub struct PlainFields;

/// Room for a call span's fields (`tool=… instance=…#…`) in one allocation.
const FIELDS_BYTES: usize = 128;

impl<'writer> FormatFields<'writer> for PlainFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        // A span's fields are written into a string the fmt layer starts empty, which grows as
        // each piece arrives (three or four times for a call's span). Plain output is written
        // here first and handed over whole: the layer's string is then allocated once, at its
        // size. (A `Writer` of our own cannot be styled, so styled output goes straight there.)
        if writer.has_ansi_escapes() || !writer.sanitizes_ansi_escapes() {
            return record(writer, fields);
        }
        let mut line = String::with_capacity(FIELDS_BYTES);
        record(Writer::new(&mut line), fields)?;
        writer.write_str(&line)
    }
}

/// Writes `fields` to `writer`.
fn record(writer: Writer<'_>, fields: impl RecordFields) -> fmt::Result {
    let mut visitor = PlainVisitor {
        writer,
        is_empty: true,
        result: Ok(()),
    };
    fields.record(&mut visitor);
    visitor.result
}

struct PlainVisitor<'writer> {
    writer: Writer<'writer>,
    /// Nothing written yet: the next field needs no space before it.
    is_empty: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// Whether `name` is written the plain way: not the styled output for a terminal, and not
    /// a name the default writer treats specially.
    fn plain(&self, name: &str) -> bool {
        !self.writer.has_ansi_escapes() && name != "message" && !name.starts_with("r#")
    }

    /// `name=` after a space if anything came before.
    fn write_name(&mut self, name: &str) -> fmt::Result {
        if self.is_empty {
            self.is_empty = false;
        } else {
            self.writer.write_char(' ')?;
        }
        self.writer.write_str(name)?;
        self.writer.write_char('=')
    }

    /// Hands one field to the default writer, continuing this line.
    fn by_default(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        let mut default = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut default);
        self.result = default.finish();
        self.is_empty = false;
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        if !self.plain(field.name()) {
            return self.by_default(|default| default.record_str(field, value));
        }
        self.result = self.write_name(field.name()).and_then(|()| {
            // `{:?}` of a string of printable ASCII without quotes or backslashes is the string
            // in quotes.
            if value
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
            {
                self.writer.write_char('"')?;
                self.writer.write_str(value)?;
                self.writer.write_char('"')
            } else {
                write!(self.writer, "{value:?}")
            }
        });
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.result.is_err() {
            return;
        }
        self.by_default(|default| default.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        // What `log` records carry as fields, which the line shows already (the default skips
        // them too).
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        if !self.plain(name) {
            return self.by_default(|default| default.record_debug(field, value));
        }
        self.result = self
            .write_name(name)
            .and_then(|()| write!(self.writer, "{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::{
        fmt::{MakeWriter, format::DefaultFields},
        layer::SubscriberExt,
    };

    use super::*;

    /// A log writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    /// Logs the same lines (in spans, with every kind of field) through `fields`, and returns
    /// the text without the timestamps.
    fn logged<N>(fields: N, ansi: bool) -> String
    where
        N: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let buffer = Buffer::default();
        let layer = tracing_subscriber::fmt::layer()
            .fmt_fields(fields)
            .with_writer(buffer.clone())
            .with_ansi(ansi)
            .without_time();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let error = std::io::Error::other("disk on fire");
            let span = tracing::info_span!(
                "call",
                tool = %"invoice.status",
                instance = %"invoice#0a1b2c",
                outcome = tracing::field::Empty,
                r#type = "x",
            );
            let _entered = span.enter();
            span.record("outcome", tracing::field::display("OK"));
            tracing::info!(
                plain = "a.b-c#d",
                quoted = "say \"hi\"",
                unicode = "größe",
                tab = "a\tb",
                n = 42,
                f = 1.5,
                yes = true,
                debug = ?vec![1, 2],
                shown = %"as is",
                error = &error as &(dyn std::error::Error + 'static),
                "the message, {}",
                "formatted"
            );
            tracing::warn!(only = "one");
            tracing::warn!("only a message");
        });
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn writes_what_the_default_writes() {
        for ansi in [false, true] {
            let plain = logged(PlainFields, ansi);
            assert_eq!(plain, logged(DefaultFields::new(), ansi), "ansi: {ansi}");
        }
        let plain = logged(PlainFields, false);
        assert!(
            plain.contains(
                "call{tool=invoice.status instance=invoice#0a1b2c type=\"x\" outcome=OK}"
            ),
            "{plain}"
        );
        assert!(
            plain.contains(r#"plain="a.b-c#d" quoted="say \"hi\"" unicode="größe" tab="a\tb""#),
            "{plain}"
        );
    }
}

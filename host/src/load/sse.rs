//! Server-sent events, as far as MCP's Streamable HTTP uses them: the `data:` lines of each
//! event, joined, handed on when the blank line that ends the event arrives.
//!
//! Owns only the framing; what the payload means is the client's business. Accepts `\n` and
//! `\r\n` line ends (rmcp writes the first, the Python SDK's `sse-starlette` the second) and
//! chunks cut anywhere, since a TCP read ends wherever it ends.

/// An incremental parser: feed it chunks as they arrive.
#[derive(Default)]
pub struct SseParser {
    /// The line being read (no line end yet).
    line: Vec<u8>,
    /// The `data:` lines of the event being read, joined with `\n`.
    data: Vec<u8>,
    has_data: bool,
}

impl SseParser {
    /// Parses `chunk`; calls `on_event` with the data of every event it completes.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(&[u8])) {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&byte| byte == b'\n') {
            self.line.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            self.end_line(&mut on_event);
        }
        self.line.extend_from_slice(rest);
    }

    /// The stream ended: an event the server did not close with a blank line still counts.
    pub fn finish(&mut self, mut on_event: impl FnMut(&[u8])) {
        if !self.line.is_empty() {
            self.end_line(&mut on_event);
        }
        self.dispatch(&mut on_event);
    }

    fn end_line(&mut self, on_event: &mut impl FnMut(&[u8])) {
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        if self.line.is_empty() {
            self.dispatch(on_event);
        } else if let Some(value) = self.line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        // Other fields (`id:`, `event:`, `retry:`) and comments (`:`) carry nothing MCP needs.
        self.line.clear();
    }

    fn dispatch(&mut self, on_event: &mut impl FnMut(&[u8])) {
        if self.has_data {
            on_event(&self.data);
        }
        self.data.clear();
        self.has_data = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<String> {
        let mut parser = SseParser::default();
        let mut seen = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, |data| {
                seen.push(String::from_utf8(data.to_vec()).unwrap())
            });
        }
        parser.finish(|data| seen.push(String::from_utf8(data.to_vec()).unwrap()));
        seen
    }

    #[test]
    fn events_split_anywhere_and_either_line_end() {
        let stream: &[u8] = b"id: 1\r\ndata: {\"a\":1}\r\n\r\n: keep-alive\n\ndata:{\"b\":2}\n\n";
        for cut in 0..stream.len() {
            let (left, right) = stream.split_at(cut);
            assert_eq!(
                events(&[left, right]),
                ["{\"a\":1}", "{\"b\":2}"],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn multi_line_data_is_joined_and_an_unterminated_event_counts() {
        assert_eq!(events(&[b"data: a\ndata: b\n\ndata: c"]), ["a\nb", "c"]);
        assert!(events(&[b"event: ping\n\n"]).is_empty());
    }
}

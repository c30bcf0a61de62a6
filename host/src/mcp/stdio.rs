//! Serving one client over stdin/stdout (stdout carries only the protocol; logs go to stderr).
//!
//! Turnstile reads the lines itself instead of handing stdin to rmcp's stdio transport, because
//! rmcp drops a line that is not JSON without a word (the client waits forever) and answers JSON
//! of the wrong shape without its `id`. Here each line is parsed once, into rmcp's message type,
//! and handed to rmcp already parsed; a line that does not parse is answered with the JSON-RPC
//! error `jsonrpc_errors.rs` chooses (-32700, or -32600 with the `id` echoed), and the server
//! reads on. Every line that goes out, rmcp's and those errors alike, passes through one writer
//! task, so two lines never interleave on stdout.
//!
//! This module must not look inside valid messages: it only frames lines and parses each once
//! (but for `legacy_tasks.rs`'s renaming of the 2025-11-25 task requests, and its addition to
//! the `initialize` answer).

use std::{io, sync::Arc, time::Duration};

use rmcp::{
    RoleServer, ServiceExt,
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    sync::mpsc,
};

use super::{
    jsonrpc_errors::{self, Rejection},
    legacy_tasks,
};
use crate::mcp::handler::server::{Shared, TurnstileServer};

/// The longest line read as a message (rmcp's own stdio transport allows the same); a longer one
/// is answered with -32600 and skipped.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// The line buffer is kept between lines up to this size; the memory of a huge one is returned.
const KEPT_CAPACITY: usize = 1024 * 1024;

/// Lines waiting for stdout; a slow reader on the other end holds up the senders beyond this.
const OUTGOING_LINES: usize = 256;

/// How long to wait at the end for lines already queued to reach stdout.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

/// Serves until the client closes stdin. The connection is one session, so its instances and
/// subscriptions end with it.
pub async fn serve_stdio(shared: Arc<Shared>) -> anyhow::Result<()> {
    // rmcp's stdio handles: non-blocking pipes when stdin and stdout are pipes, as under a client.
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let (transport, writer) = LineTransport::new(stdin, stdout);
    let running = TurnstileServer::new(shared, None).serve(transport).await?;
    let reason = running.waiting().await?;
    tracing::info!(?reason, "stdio client disconnected");
    // The writer ends once the transport (and with it the last sender) is gone.
    if tokio::time::timeout(FLUSH_AT_EXIT, writer).await.is_err() {
        tracing::debug!("stdout writer did not finish in time");
    }
    Ok(())
}

/// rmcp's transport over newline-delimited JSON, answering unreadable lines itself.
struct LineTransport<R> {
    input: tokio::io::BufReader<R>,
    /// The line being read; kept between lines for its capacity.
    line: Vec<u8>,
    /// Lines for the writer task, newline included.
    output: mpsc::Sender<Vec<u8>>,
}

impl<R: AsyncRead + Unpin + Send + 'static> LineTransport<R> {
    /// The transport, and the writer task that owns `output` until every sender is dropped.
    fn new<W: AsyncWrite + Unpin + Send + 'static>(
        input: R,
        output: W,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (lines, to_write) = mpsc::channel(OUTGOING_LINES);
        let writer = tokio::spawn(write_lines(to_write, output));
        let transport = LineTransport {
            input: tokio::io::BufReader::new(input),
            line: Vec::new(),
            output: lines,
        };
        (transport, writer)
    }
}

/// Answers an unreadable line; false when stdout is gone.
async fn reject(output: &mpsc::Sender<Vec<u8>>, rejection: Rejection) -> bool {
    let mut line = rejection.to_bytes();
    line.push(b'\n');
    output.send(line).await.is_ok()
}

impl<R: AsyncRead + Unpin + Send + 'static> Transport<RoleServer> for LineTransport<R> {
    type Error = io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        // Serialized here, so the future holds bytes rather than the message.
        let line = legacy_tasks::to_line(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        let output = self.output.clone();
        async move {
            output.send(line?).await.map_err(|_| {
                io::Error::new(io::ErrorKind::BrokenPipe, "the stdout writer has ended")
            })
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if self.line.capacity() > KEPT_CAPACITY {
                self.line = Vec::new();
            }
            self.line.clear();
            match read_line(&mut self.input, &mut self.line).await {
                Ok(Line::Complete) => {}
                Ok(Line::TooLong) => {
                    let rejection = Rejection::invalid_request(
                        serde_json::Value::Null,
                        format!("Invalid Request: message longer than {MAX_LINE} bytes"),
                    );
                    if !reject(&self.output, rejection).await {
                        return None;
                    }
                    continue;
                }
                // An unterminated last line is an incomplete message, as rmcp treats it too.
                Ok(Line::End) => return None,
                Err(error) => {
                    tracing::error!(%error, "cannot read stdin");
                    return None;
                }
            }
            let line = message_bytes(&self.line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let renamed = legacy_tasks::renamed(line, crate::catalog::served_task_tools());
            let line = renamed.as_deref().unwrap_or(line);
            match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
                Ok(message) => return Some(message),
                Err(error) => {
                    tracing::debug!(%error, "answering an unreadable line");
                    // Parsed again only now, to tell what is wrong and find the `id`.
                    if !reject(&self.output, jsonrpc_errors::classify(line)).await {
                        return None;
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        Ok(())
    }
}

/// A line without its `\n` / `\r\n` and a UTF-8 byte-order mark.
fn message_bytes(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

enum Line {
    /// `line` holds a line ending in `\n`.
    Complete,
    /// The line was longer than [`MAX_LINE`]; it has been read past and dropped.
    TooLong,
    /// Input ended (a partial last line is dropped).
    End,
}

/// Reads one line into `line`, which is empty, holding no more than [`MAX_LINE`] bytes of it.
async fn read_line<R: AsyncBufRead + Unpin>(input: &mut R, line: &mut Vec<u8>) -> io::Result<Line> {
    let limit = MAX_LINE as u64 + 1;
    (&mut *input).take(limit).read_until(b'\n', line).await?;
    if line.last() == Some(&b'\n') {
        return Ok(Line::Complete);
    }
    if line.len() <= MAX_LINE {
        return Ok(Line::End);
    }
    // Too long: give the memory back and skip to the end of the line.
    *line = Vec::new();
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(Line::End);
        }
        match available.iter().position(|&byte| byte == b'\n') {
            Some(end) => {
                input.consume(end + 1);
                return Ok(Line::TooLong);
            }
            None => {
                let all = available.len();
                input.consume(all);
            }
        }
    }
}

/// Writes queued lines to `output` in order until every sender is gone. A burst goes out in one
/// write; a lone line is flushed at once.
async fn write_lines<W: AsyncWrite + Unpin>(mut lines: mpsc::Receiver<Vec<u8>>, output: W) {
    let mut output = tokio::io::BufWriter::new(output);
    while let Some(line) = lines.recv().await {
        let written = match output.write_all(&line).await {
            Ok(()) if lines.is_empty() => output.flush().await,
            other => other,
        };
        if let Err(error) = written {
            tracing::debug!(%error, "cannot write to stdout");
            return;
        }
    }
    let _ = output.flush().await;
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;

    /// Feeds `input` to a transport and collects what it hands rmcp and what it answers itself.
    async fn run(input: &str) -> (Vec<ClientJsonRpcMessage>, Vec<Value>) {
        let (mut client, server_in) = tokio::io::duplex(1024);
        let (server_out, client_out) = tokio::io::duplex(64 * 1024);
        let (mut transport, writer) = LineTransport::new(server_in, server_out);
        client.write_all(input.as_bytes()).await.unwrap();
        drop(client);
        let mut messages = Vec::new();
        while let Some(message) = transport.receive().await {
            messages.push(message);
        }
        drop(transport);
        writer.await.unwrap();
        let mut replies = Vec::new();
        let mut lines = BufReader::new(client_out).lines();
        while let Some(line) = lines.next_line().await.unwrap() {
            replies.push(serde_json::from_str(&line).unwrap());
        }
        (messages, replies)
    }

    #[tokio::test]
    async fn every_unreadable_line_is_answered_and_reading_goes_on() {
        let (messages, replies) = run(concat!(
            "garbage\n",
            "{}\n",
            "\n",
            "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":\"x\"}\r\n",
            "[{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}]\n",
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n",
        ))
        .await;
        assert_eq!(messages.len(), 1, "only the ping reaches rmcp");
        let summary: Vec<(Value, Value)> = replies
            .iter()
            .map(|reply| (reply["error"]["code"].clone(), reply["id"].clone()))
            .collect();
        assert_eq!(
            summary,
            [
                (json!(-32700), Value::Null),
                (json!(-32600), Value::Null),
                (json!(-32600), json!(5)),
                (json!(-32600), Value::Null),
            ]
        );
    }

    #[tokio::test]
    async fn what_rmcp_sends_goes_out_as_one_line() {
        let (server_in, _client) = tokio::io::duplex(16);
        let (server_out, client_out) = tokio::io::duplex(1024);
        let (mut transport, writer) = LineTransport::new(server_in, server_out);
        let message: ServerJsonRpcMessage =
            serde_json::from_value(json!({"jsonrpc":"2.0","id":1,"result":{}})).unwrap();
        transport.send(message).await.unwrap();
        drop(transport);
        writer.await.unwrap();
        let mut line = String::new();
        BufReader::new(client_out)
            .read_line(&mut line)
            .await
            .unwrap();
        assert_eq!(line, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
    }
}

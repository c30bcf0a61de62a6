//! `turnstile serve --stdio` spoken to line by line: the one raw stdio harness, for tests that
//! send what a conforming client never would (rmcp's client over stdio is `Client::stdio`).

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use serde_json::Value;

use super::{STDIO_SERVE, turnstile_bin};

/// How long a test waits for the server's next line before it fails.
const REPLY_WITHIN: Duration = Duration::from_secs(10);

/// A `turnstile serve --stdio` child (memory store, `plugins`), killed on drop. Its stdout is
/// read on a thread, so a missing reply fails the test after 10 s instead of hanging it.
pub struct RawStdio {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl RawStdio {
    pub fn start(plugins: &Path) -> RawStdio {
        let mut child = Command::new(turnstile_bin())
            .args(STDIO_SERVE)
            .arg(plugins)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start turnstile --stdio");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        RawStdio {
            child,
            stdin,
            lines,
        }
    }

    /// Writes `line` (any bytes, even invalid UTF-8) and a newline.
    pub fn send(&mut self, line: impl AsRef<[u8]>) {
        self.stdin.write_all(line.as_ref()).expect("write a line");
        self.stdin.write_all(b"\n").expect("write a newline");
        self.stdin.flush().expect("flush");
    }

    /// The next line the server writes, as JSON.
    pub fn reply(&self, what: &str) -> Value {
        let line = self
            .lines
            .recv_timeout(REPLY_WITHIN)
            .unwrap_or_else(|_| panic!("{what}: no reply within 10 s"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}"))
    }

    /// The next message carrying `id`, skipping notifications.
    pub fn reply_to(&self, id: &Value) -> Value {
        loop {
            let message = self.reply(&format!("the reply to {id}"));
            if &message["id"] == id {
                return message;
            }
        }
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

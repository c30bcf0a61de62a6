//! The stdio transport (`turnstile load --stdio -- COMMAND…`): one server process per session,
//! newline-delimited JSON-RPC on its stdin and stdout. A reader task hands each response to the
//! request waiting for it and counts every `list_changed`, whenever it arrives.
//!
//! Owns the child process: it is ended (stdin closed, then killed if it lingers) with the
//! session, and killed if the session is dropped.

use std::{
    collections::HashMap,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, ChildStdin, Command},
    sync::oneshot,
    task::JoinHandle,
};

use super::wire::{ClientError, Notices, is_list_changed};

/// Requests sent and not yet answered, by id.
type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// How long a server may take to exit once its stdin is closed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

pub struct StdioLink {
    child: Child,
    stdin: ChildStdin,
    pending: Pending,
    reader: JoinHandle<()>,
}

impl StdioLink {
    /// Starts `command` (program and arguments); its stderr goes to ours.
    pub fn spawn(command: &[String], notices: Arc<Notices>) -> Result<StdioLink, ClientError> {
        let (program, arguments) = command
            .split_first()
            .ok_or_else(|| ClientError::Connect("--stdio needs a command after --".into()))?;
        let mut child = Command::new(program)
            .args(arguments)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| ClientError::Connect(format!("cannot start {program}: {error}")))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let pending: Pending = Arc::default();
        let waiting = pending.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if is_list_changed(&message) {
                    notices.record();
                } else if let Some(id) = message.get("id").and_then(Value::as_u64)
                    && (message.get("result").is_some() || message.get("error").is_some())
                {
                    let sender = waiting
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&id);
                    if let Some(sender) = sender {
                        let _ = sender.send(message);
                    }
                }
                // Requests from the server (sampling, roots, …) are not answered: a load
                // client offers no such capabilities.
            }
        });
        Ok(StdioLink {
            child,
            stdin,
            pending,
            reader,
        })
    }

    /// Sends request `id` and waits for its response.
    pub async fn request(
        &mut self,
        id: u64,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, ClientError> {
        let (sender, answer) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, sender);
        self.send(body).await?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(ClientError::Connect("the server closed its stdout".into())),
            Err(_) => {
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                Err(ClientError::Timeout(timeout))
            }
        }
    }

    /// Writes one message (a notification, or a request whose answer is awaited elsewhere).
    pub async fn send(&mut self, body: &Value) -> Result<(), ClientError> {
        let mut line = serde_json::to_vec(body).expect("a JSON value always serializes");
        line.push(b'\n');
        self.stdin
            .write_all(&line)
            .await
            .map_err(|error| ClientError::Connect(format!("the server's stdin: {error}")))
    }

    /// Closes stdin, as a client hanging up does, and waits a little for the server to exit.
    pub async fn close(self) {
        let StdioLink {
            mut child,
            stdin,
            reader,
            ..
        } = self;
        drop(stdin);
        if tokio::time::timeout(EXIT_GRACE, child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
        reader.abort();
    }
}

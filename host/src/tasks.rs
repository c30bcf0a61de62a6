//! Tasks: tool calls that answer at once with a task id and run on, which the client polls and
//! may cancel (MCP's tasks; on 2026-07-28 the extension `io.modelcontextprotocol/tasks`).
//!
//! This module owns the table of the tasks this server runs and has run: each task's status,
//! its outcome once it ends, who may see it, its cancellation, and when it is forgotten. It
//! names no protocol type: an outcome is kept as the JSON the client will be given (the call's
//! result, or the JSON-RPC error it ended with), so the wire side (`mcp/handler/tasks.rs`)
//! decides every client-visible shape and this one only keeps and tells.
//!
//! A task lives in the memory of the server that runs it, for its `ttl` after it was created
//! (a task still running past it is kept until it ends, and then for one poll interval more):
//! a client polls the server it started the task on.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};
use std::time::Duration;

use dashmap::DashMap;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::store::now_ms;

/// How long a finished task is kept when the client asked for no `ttl`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);

/// The longest `ttl` a client may ask for: a task's outcome is held in memory until then.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// How often a client is told to poll.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Every this many tasks created, the table drops those past their `ttl`.
const SWEEP_EVERY: usize = 64;

/// Where a task stands.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskStatus {
    Working,
    /// Ended with the call's result (a tool error included: the call itself completed).
    Completed(Value),
    /// Ended without a result: the JSON-RPC error the call would have been answered with.
    Failed(Value),
    /// Cancelled by its client before it ended.
    Cancelled,
}

impl TaskStatus {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, TaskStatus::Working)
    }
}

/// The handle of the instance task `id` runs on, if its id names one ([`Tasks::create`]).
pub fn instance_handle(id: &str) -> Option<&str> {
    id.split_once('.')
        .map(|(_, handle)| handle)
        .filter(|handle| !handle.is_empty())
}

/// Who may see a task: the principal that created it when the server authenticates, anyone
/// holding its id (a random 128-bit bearer token) when it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOwner(pub Option<String>);

/// One task: what the table keeps of it.
#[derive(Debug)]
pub struct Task {
    pub id: String,
    /// The tool it runs (for logs and the console).
    pub tool: String,
    pub owner: TaskOwner,
    pub created_at_ms: u64,
    /// How long after its creation the task is kept (at least until it ends).
    pub ttl: Duration,
    /// Cancelled by `tasks/cancel`: the call's plugin sees it through `is_cancelled`.
    pub cancellation: CancellationToken,
    status: watch::Sender<(TaskStatus, u64)>,
}

impl Task {
    /// Its status and when it last changed (unix ms).
    pub fn status(&self) -> (TaskStatus, u64) {
        self.status.borrow().clone()
    }

    /// Ends the task with `status`, unless it has ended already (a cancel that came first
    /// stands). Returns whether this ended it.
    pub fn end(&self, status: TaskStatus) -> bool {
        debug_assert!(status.is_terminal());
        self.status.send_if_modified(|(current, at)| {
            if current.is_terminal() {
                return false;
            }
            *current = status;
            *at = now_ms();
            true
        })
    }

    /// Waits until the task has ended, and returns how.
    pub async fn ended(&self) -> TaskStatus {
        let mut watching = self.status.subscribe();
        match watching.wait_for(|(status, _)| status.is_terminal()).await {
            Ok(ended) => ended.0.clone(),
            // The sender lives as long as `self`: unreachable, but not worth a panic.
            Err(_) => self.status().0,
        }
    }

    /// Whether the table may forget it at `now`.
    fn expired(&self, now: u64) -> bool {
        let (status, at) = self.status();
        let kept_until = self
            .created_at_ms
            .saturating_add(self.ttl.as_millis() as u64);
        status.is_terminal()
            && now >= kept_until
            && now >= at.saturating_add(POLL_INTERVAL.as_millis() as u64)
    }
}

/// The tasks this server runs and has run.
#[derive(Default)]
pub struct Tasks {
    table: DashMap<String, Arc<Task>>,
    created: AtomicUsize,
}

impl Tasks {
    /// A new working task of `tool` for `owner`, kept `ttl` (the default when `None`, at most
    /// [`MAX_TTL`]). Its id is 128 random bits, followed, for a task of a handle-keyed instance,
    /// by `.` and the `handle`: a server that does not hold the task in memory finds it in the
    /// instance's record ([`instance_handle`]).
    pub fn create(
        &self,
        tool: &str,
        owner: TaskOwner,
        ttl: Option<Duration>,
        handle: Option<&str>,
    ) -> Arc<Task> {
        if self.created.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep();
        }
        let now = now_ms();
        let task = Arc::new(Task {
            id: match handle {
                Some(handle) => format!("{}.{handle}", uuid::Uuid::new_v4().simple()),
                None => uuid::Uuid::new_v4().simple().to_string(),
            },
            tool: tool.to_owned(),
            owner,
            created_at_ms: now,
            ttl: ttl.unwrap_or(DEFAULT_TTL).min(MAX_TTL),
            cancellation: CancellationToken::new(),
            status: watch::Sender::new((TaskStatus::Working, now)),
        });
        self.table.insert(task.id.clone(), task.clone());
        task
    }

    /// The task `id`, if `owner` may see it and it is still kept. A task of someone else's is
    /// not found, exactly as one that never existed.
    pub fn get(&self, id: &str, owner: &TaskOwner) -> Option<Arc<Task>> {
        let task = self.table.get(id)?.clone();
        (task.owner == *owner && !task.expired(now_ms())).then_some(task)
    }

    /// Asks task `id` to stop: its plugin is told, and it ends `Cancelled` unless it has ended.
    /// `None` if `owner` has no such task.
    pub fn cancel(&self, id: &str, owner: &TaskOwner) -> Option<Arc<Task>> {
        let task = self.get(id, owner)?;
        if task.end(TaskStatus::Cancelled) {
            tracing::info!(task = %task.id, tool = %task.tool, "task cancelled by its client");
        }
        task.cancellation.cancel();
        Some(task)
    }

    /// Forgets task `id`: its call did not start after all (refused, or answered at once).
    pub fn forget(&self, id: &str) {
        self.table.remove(id);
    }

    /// How many tasks are kept.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Forgets the tasks past their `ttl`.
    fn sweep(&self) {
        let now = now_ms();
        self.table.retain(|_, task| !task.expired(now));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn alice() -> TaskOwner {
        TaskOwner(Some("token:alice".into()))
    }

    #[test]
    fn a_task_is_seen_only_by_its_owner() {
        let tasks = Tasks::default();
        let task = tasks.create("t", alice(), None, None);
        assert!(tasks.get(&task.id, &alice()).is_some());
        assert!(
            tasks
                .get(&task.id, &TaskOwner(Some("token:bob".into())))
                .is_none()
        );
        assert!(tasks.get(&task.id, &TaskOwner(None)).is_none());
        assert!(tasks.cancel(&task.id, &TaskOwner(None)).is_none());
        assert_eq!(task.status().0, TaskStatus::Working);
        assert!(tasks.get("nope", &alice()).is_none());
    }

    #[test]
    fn the_first_end_stands() {
        let tasks = Tasks::default();
        let task = tasks.create("t", alice(), None, None);
        tasks.cancel(&task.id, &alice()).unwrap();
        assert!(task.cancellation.is_cancelled());
        assert!(!task.end(TaskStatus::Completed(json!({"content": []}))));
        assert_eq!(task.status().0, TaskStatus::Cancelled);
        // Cancelling an ended task changes nothing and still finds it.
        assert!(tasks.cancel(&task.id, &alice()).is_some());
        assert_eq!(task.status().0, TaskStatus::Cancelled);
    }

    #[tokio::test]
    async fn a_waiter_hears_the_end() {
        let tasks = Tasks::default();
        let task = tasks.create("t", alice(), None, None);
        let waiting = tokio::spawn({
            let task = task.clone();
            async move { task.ended().await }
        });
        tokio::task::yield_now().await;
        assert!(task.end(TaskStatus::Failed(json!({"code": -32603}))));
        assert_eq!(
            waiting.await.unwrap(),
            TaskStatus::Failed(json!({"code": -32603}))
        );
    }

    #[test]
    fn an_ended_task_is_forgotten_after_its_ttl_and_a_running_one_is_not() {
        let tasks = Tasks::default();
        let ended = tasks.create("t", alice(), Some(Duration::ZERO), None);
        let running = tasks.create("t", alice(), Some(Duration::ZERO), None);
        ended.end(TaskStatus::Completed(json!({})));
        let later = now_ms() + POLL_INTERVAL.as_millis() as u64 + 1;
        assert!(ended.expired(later));
        assert!(!running.expired(later));
        // A task of an instance names its handle.
        let scoped = tasks.create("t", alice(), None, Some("migration-1f"));
        assert_eq!(instance_handle(&scoped.id), Some("migration-1f"));
        assert_eq!(instance_handle(&ended.id), None);
        // Asked for longer than the most kept: the most.
        let long = tasks.create("t", alice(), Some(MAX_TTL * 2), None);
        assert_eq!(long.ttl, MAX_TTL);
    }
}

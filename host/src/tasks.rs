//! Tasks: tool calls that answer at once with a task id and run on, which the client polls and
//! may cancel (MCP's tasks; on 2026-07-28 the extension `io.modelcontextprotocol/tasks`).
//!
//! This module owns the table of the tasks this server runs and has run: each task's status,
//! its outcome once it ends, who may see it, its cancellation, and when it is forgotten. It
//! names no protocol type: an outcome is kept as the JSON the client will be given (the call's
//! result, or the JSON-RPC error it ended with), so the wire side (`mcp/handler/tasks.rs`)
//! decides every client-visible shape and this one only keeps and tells.
//!
//! A task whose call asks for input (a handler's question, a binding's confirmation) waits in
//! the table: it shows the requests still unanswered (`input_required`), takes the client's
//! answers by key as they come (`tasks/update`), and hands them to the waiting call once every
//! one is in. The requests and answers are kept as JSON too; what they mean is `asking.rs`'s.
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
use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::store::now_ms;

/// How long a finished task is kept when the client asked for no `ttl`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);

/// The longest `ttl` a client may ask for: a task's outcome is held in memory until then.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// How often a client is told to poll.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The store mark by which a server asked to cancel task `id` tells the server running it
/// (`mcp/handler/cancel_elsewhere.rs`).
pub fn cancel_mark(id: &str) -> String {
    format!("task-cancel/{id}")
}

/// Every this many tasks created, the table drops those past their `ttl`.
const SWEEP_EVERY: usize = 64;

/// Where a task stands.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskStatus {
    Working,
    /// Waiting for the client's answers: the requests not answered yet, by key (`{"method",
    /// "params"}` each, as the call asked them).
    InputRequired(Map<String, Value>),
    /// Ended with the call's result (a tool error included: the call itself completed).
    Completed(Value),
    /// Ended without a result: the JSON-RPC error the call would have been answered with.
    Failed(Value),
    /// Cancelled by its client before it ended.
    Cancelled,
}

impl TaskStatus {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, TaskStatus::Working | TaskStatus::InputRequired(_))
    }
}

/// The handle of the instance task `id` runs on, if its id names one ([`Tasks::create`]).
pub fn instance_handle(id: &str) -> Option<&str> {
    id.split_once('.')
        .map(|(_, handle)| handle)
        .filter(|handle| !handle.is_empty())
}

/// Why a task's call got no answers to what it asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// The task ended while it waited (its client cancelled it).
    Ended,
    /// No answer came within the task's `ttl`.
    TimedOut,
    /// It asked under a key it had asked under before: a task's keys are unique over its life,
    /// so that a late answer to an earlier question is never taken for the new one.
    KeyReused(String),
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
    state: watch::Sender<State>,
    /// What the task holds until it ends (its place under a quota).
    held: Held,
}

/// What a task holds until it ends, dropped then.
#[derive(Default)]
struct Held(std::sync::Mutex<Option<Box<dyn Send + Sync>>>);

impl Held {
    fn release(&self) {
        let held = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        drop(held);
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Held")
    }
}

/// What the task's watch holds: its status, when it last changed, and what the asking call
/// is to be handed. One value, so that an answer leaves the requests shown and joins those
/// handed over in one step (a `tasks/get` right after a `tasks/update` sees it taken).
#[derive(Debug)]
struct State {
    status: TaskStatus,
    /// When `status` last changed (unix ms).
    at: u64,
    /// The answers taken for the current round of asking, by key.
    answers: Map<String, Value>,
    /// Every key the task has asked under.
    asked: std::collections::HashSet<String>,
}

impl Task {
    /// Its status and when it last changed (unix ms).
    pub fn status(&self) -> (TaskStatus, u64) {
        let state = self.state.borrow();
        (state.status.clone(), state.at)
    }

    /// Ends the task with `status`, unless it has ended already (a cancel that came first
    /// stands), and gives back what it held. Returns whether this ended it.
    pub fn end(&self, status: TaskStatus) -> bool {
        debug_assert!(status.is_terminal());
        let ended = self.state.send_if_modified(|state| {
            if state.status.is_terminal() {
                return false;
            }
            state.status = status;
            state.at = now_ms();
            state.answers.clear();
            true
        });
        self.held.release();
        ended
    }

    /// Keeps `held` (a place under a quota, say) until the task ends or is forgotten.
    pub fn hold_until_end(&self, held: impl Send + Sync + 'static) {
        *self
            .held
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Box::new(held));
    }

    /// Waits until the task has ended, and returns how.
    pub async fn ended(&self) -> TaskStatus {
        let mut watching = self.state.subscribe();
        match watching.wait_for(|state| state.status.is_terminal()).await {
            Ok(ended) => ended.status.clone(),
            // The sender lives as long as `self`: unreachable, but not worth a panic.
            Err(_) => self.status().0,
        }
    }

    /// The task's call asks `requests` (by key): the task shows them (`input_required`) until
    /// every one is answered ([`Task::answer`]), then works again, and the call gets the
    /// answers, by key. Waits at most until the task's `ttl` has run since it was created.
    pub async fn ask(
        &self,
        requests: Map<String, Value>,
    ) -> Result<Map<String, Value>, Unanswered> {
        if requests.is_empty() {
            return Ok(Map::new());
        }
        let mut refused = None;
        self.state.send_if_modified(|state| {
            if state.status.is_terminal() {
                refused = Some(Unanswered::Ended);
                return false;
            }
            if let Some(reused) = requests.keys().find(|key| state.asked.contains(*key)) {
                refused = Some(Unanswered::KeyReused(reused.clone()));
                return false;
            }
            state.asked.extend(requests.keys().cloned());
            state.status = TaskStatus::InputRequired(requests);
            state.at = now_ms();
            state.answers.clear();
            true
        });
        if let Some(refused) = refused {
            return Err(refused);
        }
        let kept_until = self
            .created_at_ms
            .saturating_add(self.ttl.as_millis() as u64);
        let left = Duration::from_millis(kept_until.saturating_sub(now_ms()));
        let mut watching = self.state.subscribe();
        let answered =
            watching.wait_for(|state| !matches!(state.status, TaskStatus::InputRequired(_)));
        let working = match tokio::time::timeout(left, answered).await {
            Ok(Ok(state)) => state.status == TaskStatus::Working,
            // The sender lives as long as `self`: unreachable, but not worth a panic.
            Ok(Err(_)) => false,
            Err(_) => return Err(Unanswered::TimedOut),
        };
        if !working {
            // It ended (cancelled) while it waited.
            return Err(Unanswered::Ended);
        }
        let mut answers = Map::new();
        // Taken without telling the watchers: the status did not change.
        self.state.send_if_modified(|state| {
            answers = std::mem::take(&mut state.answers);
            false
        });
        Ok(answers)
    }

    /// Answers from the client (`tasks/update`): each to a request the task shows is taken, and
    /// the request no longer shown; any other (a key never asked, answered already, or of an
    /// earlier round) is ignored. Once every request is answered the task works again and its
    /// call gets the answers. Returns the keys taken.
    pub fn answer(&self, answers: impl IntoIterator<Item = (String, Value)>) -> Vec<String> {
        let mut taken = Vec::new();
        self.state.send_if_modified(|state| {
            let TaskStatus::InputRequired(pending) = &mut state.status else {
                return false;
            };
            for (key, answer) in answers {
                if pending.remove(&key).is_some() {
                    state.answers.insert(key.clone(), answer);
                    taken.push(key);
                }
            }
            if taken.is_empty() {
                return false;
            }
            if pending.is_empty() {
                state.status = TaskStatus::Working;
            }
            state.at = now_ms();
            true
        });
        taken
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
            held: Held::default(),
            state: watch::Sender::new(State {
                status: TaskStatus::Working,
                at: now,
                answers: Map::new(),
                asked: Default::default(),
            }),
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

    /// `owner`'s tasks still kept, oldest first.
    pub fn of(&self, owner: &TaskOwner) -> Vec<Arc<Task>> {
        let now = now_ms();
        let mut owned: Vec<Arc<Task>> = self
            .table
            .iter()
            .filter(|task| task.owner == *owner && !task.expired(now))
            .map(|task| task.value().clone())
            .collect();
        owned.sort_by_key(|task| task.created_at_ms);
        owned
    }

    /// Forgets task `id`: its call did not start after all (refused, or answered at once).
    pub fn forget(&self, id: &str) {
        if let Some((_, task)) = self.table.remove(id) {
            task.held.release();
        }
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

    fn requests(keys: &[&str]) -> Map<String, Value> {
        keys.iter()
            .map(|key| {
                let form = json!({"method": "elicitation/create", "params": {"message": key}});
                (key.to_string(), form)
            })
            .collect()
    }

    fn shown(task: &Task) -> Vec<String> {
        match task.status().0 {
            TaskStatus::InputRequired(pending) => pending.keys().cloned().collect(),
            other => panic!("not input_required: {other:?}"),
        }
    }

    /// Waits until `task` shows what it asks.
    async fn parked(task: &Task) {
        let mut watching = task.state.subscribe();
        watching
            .wait_for(|state| matches!(state.status, TaskStatus::InputRequired(_)))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_task_shows_what_it_asks_until_every_key_is_answered() {
        let tasks = Tasks::default();
        let task = tasks.create("t", alice(), None, None);
        let asking = tokio::spawn({
            let task = task.clone();
            async move { task.ask(requests(&["first", "second"])).await }
        });
        parked(&task).await;
        assert_eq!(shown(&task), ["first", "second"]);
        // An answer to a key it does not await is ignored; the task stays as it was.
        assert!(task.answer([("unknown".into(), json!({}))]).is_empty());
        assert_eq!(shown(&task), ["first", "second"]);
        // A partial answer: at once, only the other key is shown, and the call still waits.
        let first = json!({"action": "accept", "content": {"name": "partial-1"}});
        assert_eq!(task.answer([("first".into(), first.clone())]), ["first"]);
        assert_eq!(shown(&task), ["second"]);
        assert!(!asking.is_finished());
        // Answered again: ignored, the first answer stands.
        assert!(task.answer([("first".into(), json!({}))]).is_empty());
        let second = json!({"action": "accept", "content": {"name": "partial-2"}});
        task.answer([("second".into(), second.clone())]);
        assert_eq!(task.status().0, TaskStatus::Working);
        let answers = asking.await.unwrap().unwrap();
        assert_eq!(answers["first"], first);
        assert_eq!(answers["second"], second);
        // Once working, nothing is awaited: answers are ignored.
        assert!(task.answer([("second".into(), json!({}))]).is_empty());
    }

    #[tokio::test]
    async fn a_parked_task_cancelled_ends_cancelled_and_its_call_stops_waiting() {
        let tasks = Tasks::default();
        let task = tasks.create("t", alice(), None, None);
        let asking = tokio::spawn({
            let task = task.clone();
            async move { task.ask(requests(&["confirm"])).await }
        });
        parked(&task).await;
        tasks.cancel(&task.id, &alice()).unwrap();
        assert_eq!(asking.await.unwrap(), Err(Unanswered::Ended));
        assert_eq!(task.status().0, TaskStatus::Cancelled);
        assert!(task.answer([("confirm".into(), json!({}))]).is_empty());
        // An ended task asks nothing more.
        assert_eq!(task.ask(requests(&["later"])).await, Err(Unanswered::Ended));
    }

    #[tokio::test]
    async fn a_key_is_asked_once_in_a_tasks_life_and_waiting_ends_with_its_ttl() {
        let tasks = Tasks::default();
        let task = tasks.create("t", alice(), None, None);
        let asking = tokio::spawn({
            let task = task.clone();
            async move { task.ask(requests(&["name"])).await }
        });
        parked(&task).await;
        task.answer([("name".into(), json!({"action": "accept"}))]);
        asking.await.unwrap().unwrap();
        assert_eq!(
            task.ask(requests(&["name", "other"])).await,
            Err(Unanswered::KeyReused("name".into()))
        );
        assert_eq!(task.status().0, TaskStatus::Working, "refused, not parked");
        let brief = tasks.create("t", alice(), Some(Duration::ZERO), None);
        assert_eq!(
            brief.ask(requests(&["name"])).await,
            Err(Unanswered::TimedOut)
        );
        // Still asking: a parked task is not over, and is not forgotten.
        assert!(!brief.expired(now_ms() + MAX_TTL.as_millis() as u64));
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

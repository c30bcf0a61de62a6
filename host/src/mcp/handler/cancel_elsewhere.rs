//! `tasks/cancel` of a task another server runs.
//!
//! Servers sharing a store may each be asked about any task: a load balancer sends a client's
//! requests where it likes. `tasks/get` reads such a task from its instance's record
//! (`tasks.rs`); a cancel must reach the process whose plugin runs it. It travels through the
//! store, as a mark ([`tasks::cancel_mark`]): the server asked leaves it; the runner looks for
//! it every poll interval while its task works (one read of one key per running task, nothing
//! when none runs) and, finding it, cancels the task exactly as if its client had asked it
//! there: the plugin is told, only a binding's `on_cancel` fires, the trail says who. The
//! server asked waits for the record to show the end, so that it answers with what happened.
//!
//! Marks are kept by the stores that share (Redis, PostgreSQL); a store written outside
//! Turnstile may keep none (`StateStore::save_mark`'s default), and then a cancel through
//! another server is refused, saying so. A mark outlives its task: one small key per task
//! cancelled this way.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use rmcp::{
    ErrorData, RoleServer,
    model::{DetailedTask, GetTaskParams, TaskPayload},
    service::RequestContext,
};

use super::{reply, server::TurnstileServer};
use crate::{store::now_ms, tasks};

/// How long a cancel waits for the runner to end the task before answering with the task
/// still working: the runner looks every poll interval.
const WAIT_FOR_RUNNER: Duration = Duration::from_secs(5);

/// How often the record is read meanwhile.
const READ_EVERY: Duration = Duration::from_millis(100);

impl TurnstileServer {
    /// While `task` works here, on an instance of a store other servers share, hears a
    /// `tasks/cancel` that one of them was asked.
    pub(super) fn hear_cancels_from_elsewhere(&self, task: Arc<tasks::Task>) {
        if !self.shared.store.is_shared() || tasks::instance_handle(&task.id).is_none() {
            return;
        }
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let mark = tasks::cancel_mark(&task.id);
            loop {
                tokio::select! {
                    _ = task.ended() => return,
                    () = tokio::time::sleep(tasks::POLL_INTERVAL) => {}
                }
                match shared.store.load_mark(&mark).await {
                    Ok(Some(_)) => {
                        tracing::info!(task = %task.id, "task cancelled through another server");
                        shared.tasks.cancel(&task.id, &task.owner);
                        return;
                    }
                    Ok(None) => {}
                    Err(error) => {
                        tracing::debug!(task = %task.id, %error, "cannot look for a cancel");
                    }
                }
            }
        });
    }

    /// `tasks/cancel` of task `id`, which this server does not run, found as `tasks/get` finds
    /// it (the caller's own, in its instance's record). One still working is asked to stop
    /// through the store; the answer is the task as it stands once it has ended, or after
    /// [`WAIT_FOR_RUNNER`]. One that had ended already is answered as it is.
    pub(super) async fn cancel_elsewhere(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Cancelled, ErrorData> {
        let found = self.read_task(id, context).await?;
        if !is_running(&found) {
            return Ok(Cancelled::AlreadyEnded(found));
        }
        let store = &self.shared.store;
        let mark = tasks::cancel_mark(id);
        let left = match store.save_mark(&mark, now_ms()).await {
            Ok(()) => store.load_mark(&mark).await,
            Err(error) => Err(error),
        };
        match left {
            Ok(Some(_)) => {}
            Ok(None) => return Err(reply::task_runs_elsewhere(id)),
            Err(error) => return Err(reply::task_unreadable(id, &error)),
        }
        let deadline = Instant::now() + WAIT_FOR_RUNNER;
        loop {
            tokio::select! {
                () = tokio::time::sleep(READ_EVERY) => {}
                () = context.ct.cancelled() => return Err(reply::task_wait_cancelled(id)),
            }
            let now = self.read_task(id, context).await?;
            if !is_running(&now) || Instant::now() >= deadline {
                return Ok(Cancelled::Asked(now));
            }
        }
    }

    async fn read_task(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<DetailedTask, ErrorData> {
        Ok(self
            .answer_get_task(GetTaskParams::new(id), context)
            .await?
            .task)
    }
}

/// What a cancel through this server found.
pub(super) enum Cancelled {
    /// The task had ended before it was asked to stop.
    AlreadyEnded(DetailedTask),
    /// It was asked to stop: as it stands now (ended, or still working if its runner did not
    /// end it in time).
    Asked(DetailedTask),
}

fn is_running(task: &DetailedTask) -> bool {
    matches!(
        task.payload,
        TaskPayload::Working | TaskPayload::InputRequired { .. }
    )
}

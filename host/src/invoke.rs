//! Running one plugin tool: on a blocking thread (plugin calls are synchronous C calls and must
//! not stall the async threads), with a deadline; or, for a tool that declares itself quick
//! (`quick_ms` in its manifest), on the caller's own thread, which saves the two thread switches
//! of a hand-off that would cost more than the call itself. A quick call cannot be cut off either,
//! so a plugin whose quick calls keep overrunning their budget loses the privilege for good
//! (`plugin/quick.rs`: a few overruns are forgiven, and only those measured as the plugin's own
//! doing can withdraw it).
//!
//! A successful output is checked against the tool's declared output (`ToolEntry::check_output`)
//! here, before anything else sees it: a mismatch is an error and fires nothing. So is an output
//! (or a tool error's message) larger than `--max-result-bytes`, checked first.
//!
//! [`read`] produces a prompt's or resource's content the same way (static text from the
//! manifest needs no thread at all).
//!
//! A call past its deadline is reported as timed out and fires nothing. Its thread cannot be
//! interrupted (a C function cannot be cancelled from outside), so it runs on to completion in
//! the background; the instance is free again for the next call meanwhile.

use std::{sync::Arc, time::Duration};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{
    catalog::{GuardAnswers, GuardQuestion, ToolEntry},
    plugin::{
        CallContext, HostCall, LoadedPlugin, Overrun, PluginError, PluginOutput, PrimitiveKind,
    },
};

/// Why a tool produced no output.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("the plugin failed: {0}")]
    Plugin(#[from] PluginError),
    #[error("the tool did not answer within {} s", .0.as_secs_f64())]
    TimedOut(Duration),
    #[error("the tool's worker thread failed: {0}")]
    Worker(String),
    /// The plugin is running as many calls as its pool allows (a slow or hung plugin); the
    /// call did not start. Retrying later may succeed.
    #[error("the plugin is busy: all {0} of its call slots are taken; retry later")]
    Busy(usize),
    /// An earlier call on the same instance outlived its deadline and its plugin has not yet
    /// returned: two calls never overlap on one instance.
    #[error(
        "an earlier call on this instance is still running in its plugin (it outlived its \
         deadline); retry later"
    )]
    InstanceBusy,
    /// The server is shutting down and stopped waiting for the tool (see `shutdown`).
    #[error("the server is shutting down and stopped waiting for the tool")]
    ShuttingDown,
    /// The tool succeeded, but its output breaks the output convention or its `output_schema`.
    #[error("the tool's output does not match its declared output: {}", .0.join("; "))]
    BadOutput(Vec<String>),
    /// The tool answered with more than `--max-result-bytes` of JSON (or of error message).
    #[error(
        "the tool's result is {size} bytes, over the limit of {limit} bytes (--max-result-bytes)"
    )]
    ResultTooLarge { size: usize, limit: usize },
}

/// Held by the thread running an instance's plugin call, so that a call that outlived its
/// deadline keeps the instance from starting another until the plugin returns.
#[derive(Debug, Default, Clone)]
pub struct InstanceLock(Arc<std::sync::atomic::AtomicBool>);

/// The instance's lock, taken; released when dropped (by the plugin's thread).
pub struct HeldLock(Arc<std::sync::atomic::AtomicBool>);

impl InstanceLock {
    /// Whether a plugin thread runs a call of the instance now (one past its deadline, when no
    /// call is in progress): the instance's lease must outlive it.
    pub fn is_held(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    fn take(&self) -> Option<HeldLock> {
        use std::sync::atomic::Ordering;
        self.0
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| HeldLock(self.0.clone()))
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// `--max-result-bytes` when not given: 4 MiB, the same bound rmcp puts on a request body.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 4 << 20;

/// How long a plugin call may run, when to stop waiting for it altogether, and how much it may
/// answer.
#[derive(Clone, Debug)]
pub struct Limits {
    /// `--tool-timeout`: past it the call is answered `TOOL_TIMEOUT`.
    pub timeout: Duration,
    /// Cancelled when a shutdown's deadline passes: calls still running are abandoned.
    pub abandon: CancellationToken,
    /// `--max-result-bytes`: a larger output is answered `RESULT_TOO_LARGE` and fires nothing.
    pub max_result_bytes: usize,
}

/// Runs `tool` with `arguments` in `context` within `limits`. `host` receives what the plugin
/// logs or reports while it runs; past the deadline it is marked cancelled, so a plugin that
/// polls `is_cancelled` can stop instead of running on unseen.
pub async fn run(
    tool: Arc<ToolEntry>,
    arguments: Value,
    context: CallContext,
    host: Option<Arc<HostCall>>,
    limits: &Limits,
    instance: Option<&InstanceLock>,
) -> Result<PluginOutput, InvokeError> {
    let deadline = limits.timeout;
    let plugin_host = host.clone();
    let checked = tool.clone();
    // The slot travels with the thread: it is given back when the plugin returns, not when we
    // stop waiting for it.
    let held = match instance {
        Some(lock) => Some(lock.take().ok_or(InvokeError::InstanceBusy)?),
        None => None,
    };
    // An isolated plugin's call crosses a pipe and waits for another process: never inline.
    if let Some(budget_ms) = tool.manifest.quick_ms
        && !tool.plugin.is_isolated()
        && tool.plugin.pool().trusts_quick_calls()
    {
        let output = run_quick(&tool, &arguments, &context, host, budget_ms);
        drop(held);
        return check_output(&tool, output?, limits);
    }
    let Some(slot) = tool.plugin.pool().enter(crate::plugin::QUEUE_WAIT).await else {
        return Err(InvokeError::Busy(tool.plugin.pool().size()));
    };
    let running = tokio::task::spawn_blocking(move || {
        let output = tool
            .plugin
            .call_with(tool.name(), &arguments, &context, plugin_host);
        drop((slot, held));
        output
    });
    let waited = tokio::select! {
        waited = tokio::time::timeout(deadline, running) => waited,
        () = limits.abandon.cancelled() => {
            if let Some(host) = host {
                host.cancel();
            }
            return Err(InvokeError::ShuttingDown);
        }
    };
    match waited {
        Err(_) => {
            if let Some(host) = host {
                host.cancel();
            }
            checked.plugin.pool().count_past_deadline();
            tracing::warn!(
                tool = %checked.name(),
                deadline_s = deadline.as_secs_f64(),
                "a tool call outlived its deadline; its thread stays busy until the plugin returns"
            );
            Err(InvokeError::TimedOut(deadline))
        }
        Ok(Err(join)) => Err(InvokeError::Worker(join.to_string())),
        Ok(Ok(called)) => check_output(&checked, called?, limits),
    }
}

/// Produces the content of the prompt or resource `name` of `plugin` for the instance `context`
/// describes: the manifest's static `text` when it gives one, else the plugin's `read` (ABI
/// 1.3), run like a tool call: on a blocking thread, in the plugin's pool, within the deadline
/// and the result size of `limits`. A read changes nothing, so there is nothing to undo when it
/// fails; the caller turns the error into its answer.
pub async fn read(
    plugin: Arc<LoadedPlugin>,
    kind: PrimitiveKind,
    name: &str,
    request: Value,
    context: CallContext,
    limits: &Limits,
) -> Result<PluginOutput, InvokeError> {
    if let Some(text) = plugin.static_text(kind, name) {
        return Ok(PluginOutput::success(text));
    }
    let owned_name = name.to_owned();
    let output = on_worker(&plugin, limits, kind.as_str(), name, move |reader| {
        reader.read(kind, &owned_name, &request, &context)
    })
    .await??;
    check_size(&output, limits.max_result_bytes)?;
    Ok(output)
}

/// Completions of one argument of the prompt or resource template `name` (see
/// `LoadedPlugin::complete`), run like a [`read`].
pub async fn complete(
    plugin: Arc<LoadedPlugin>,
    name: &str,
    request: Value,
    context: CallContext,
    limits: &Limits,
) -> Result<Vec<String>, InvokeError> {
    let owned_name = name.to_owned();
    Ok(
        on_worker(&plugin, limits, "completion", name, move |completer| {
            completer.complete(&owned_name, &request, &context)
        })
        .await??,
    )
}

/// How many rounds of questions one run of the engine may put to its plugin's guards. Each
/// round answers at least one new question; a machine whose guards keep raising new ones
/// (eventless transitions whose assignments change what the next guard is given) past this
/// has the rest count as false, as a guard that gives no answer does.
const MAX_GUARD_ROUNDS: usize = 16;

/// Runs `engine` (a computation of the statechart engine: pure, and cheap next to a plugin
/// call) with the plugin guards it consults answered the way tool calls are run: on a blocking
/// thread, in the plugin's pool, within the deadline of `limits`, across the pipe for an
/// isolated plugin. Each round runs the engine with the answers so far, asks the plugin the
/// questions it raised, and runs it again; the last run, which asked nothing new, is the
/// result. A machine without plugin guards runs once.
pub async fn answering_guards<T>(limits: &Limits, mut engine: impl FnMut() -> T) -> T {
    let mut answers = GuardAnswers::default();
    for _ in 0..MAX_GUARD_ROUNDS {
        let (result, consulted) = answers.consult(&mut engine);
        answers = consulted;
        let questions = answers.take_unanswered();
        if questions.is_empty() {
            return result;
        }
        for question in questions {
            let passes = guard(&question, limits).await;
            answers.answer(question, passes);
        }
    }
    tracing::warn!(
        rounds = MAX_GUARD_ROUNDS,
        "a step kept asking its plugin's guards new questions; the ones left count as false"
    );
    answers.close();
    answers.consult(engine).0
}

/// Asks the plugin one guard question. A guard that cannot answer (the plugin failed, panicked,
/// timed out, was busy, or answered something else than a boolean) is false, as an XState
/// guard that throws blocks its transition; the plugin's author learns why from the log.
async fn guard(question: &GuardQuestion, limits: &Limits) -> bool {
    let GuardQuestion {
        plugin,
        name,
        params,
        context,
        event,
        ..
    } = question;
    let (owned_name, params, context, event) =
        (name.clone(), params.clone(), context.clone(), event.clone());
    let answered = on_worker(plugin, limits, "guard", name, move |plugin| {
        plugin.guard(&owned_name, &params, &context, &event)
    })
    .await;
    let error = match answered {
        Ok(Ok(passes)) => return passes,
        Ok(Err(error)) => error.to_string(),
        Err(error) => error.to_string(),
    };
    tracing::warn!(
        plugin = %plugin.manifest().name,
        guard = %name,
        %error,
        "a guard gave no answer; it counts as false"
    );
    false
}

/// Runs `work` with `plugin` on a blocking thread, in the plugin's pool, within the deadline of
/// `limits` (what is named `what` `name` in the log when it outlives it).
async fn on_worker<T: Send + 'static>(
    plugin: &LoadedPlugin,
    limits: &Limits,
    what: &str,
    name: &str,
    work: impl FnOnce(&LoadedPlugin) -> T + Send + 'static,
) -> Result<T, InvokeError> {
    let Some(slot) = plugin.pool().enter(crate::plugin::QUEUE_WAIT).await else {
        return Err(InvokeError::Busy(plugin.pool().size()));
    };
    let worker = plugin.clone();
    let running = tokio::task::spawn_blocking(move || {
        let done = work(&worker);
        drop(slot);
        done
    });
    let waited = tokio::select! {
        waited = tokio::time::timeout(limits.timeout, running) => waited,
        () = limits.abandon.cancelled() => return Err(InvokeError::ShuttingDown),
    };
    match waited {
        Err(_) => {
            plugin.pool().count_past_deadline();
            tracing::warn!(
                %name,
                kind = what,
                deadline_s = limits.timeout.as_secs_f64(),
                "a plugin's read (a prompt, resource or completion) or guard outlived its \
                 deadline; its thread stays busy until the plugin returns"
            );
            Err(InvokeError::TimedOut(limits.timeout))
        }
        Ok(Err(join)) => Err(InvokeError::Worker(join.to_string())),
        Ok(Ok(done)) => Ok(done),
    }
}

/// Runs a quick tool right here, on the caller's thread, and tells its plugin's pool if the call
/// took longer than the tool promised (the pool decides whether that costs the privilege). The
/// call is only timed, unless the pool asks for it to be measured too (just after an overrun):
/// reading the thread's CPU time and scheduler waits costs two system calls on each side.
fn run_quick(
    tool: &ToolEntry,
    arguments: &Value,
    context: &CallContext,
    host: Option<Arc<HostCall>>,
    budget_ms: u32,
) -> Result<PluginOutput, PluginError> {
    let measuring = tool.plugin.pool().quick_call_begins();
    let started = std::time::Instant::now();
    let before = if measuring { ThreadTime::now() } else { None };
    let output = tool.plugin.call_with(tool.name(), arguments, context, host);
    let took = started.elapsed();
    let budget = Duration::from_millis(budget_ms.into());
    if took <= budget {
        return output;
    }
    // An unmeasured overrun has only the wall clock's figure: where its time went is unknown.
    let used = if measuring {
        match ThreadTime::overran(before, took, budget) {
            Some(used) => Some(used),
            // The thread waited for a core: the machine's doing, not the plugin's.
            None => return output,
        }
    } else {
        None
    };
    let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
    let (took_ms, cpu_ms, blocked_ms) = (
        ms(took),
        used.as_ref().map(|used| ms(used.cpu)),
        used.as_ref().map(|used| ms(used.blocked)),
    );
    let (tool_name, plugin) = (tool.name(), tool.plugin.path().display());
    match tool.plugin.pool().quick_call_overran(measuring) {
        Overrun::Forgiven { recent, calls } => tracing::debug!(
            tool = %tool_name, %plugin, budget_ms, took_ms, measured = measuring, cpu_ms,
            blocked_ms, recent, calls,
            "a quick tool overran its budget; forgiven, as one of few"
        ),
        Overrun::Withdrawn => tracing::warn!(
            tool = %tool_name, %plugin, budget_ms, took_ms, cpu_ms, blocked_ms,
            "a quick tool keeps overrunning its budget; this plugin's calls run on worker \
             threads from now on"
        ),
        Overrun::AlreadyWithdrawn => {}
    }
    output
}

/// Where a quick call's wall-clock time went, from the kernel's per-thread scheduler
/// statistics: running, or waiting for a core.
///
/// A quick call's budget is about the plugin, not the machine: on a busy machine the kernel may
/// keep the thread off its core past the budget in the middle of a call that needs
/// microseconds, and wall-clock time alone would then take the privilege away from a plugin that
/// did nothing wrong (seen in benchmarks on shared cores). So a call overran only if the plugin
/// used more CPU than the budget, or blocked (slept, waited on I/O or a lock) for longer than
/// the budget: blocked time is the wall-clock time that was neither running nor waiting to run.
/// A brief lock wait does not count (counting every voluntary context switch, as an earlier
/// version did, lost the privilege within seconds under load to one contended allocator lock).
#[derive(Clone, Copy)]
struct ThreadTime {
    running: Duration,
    waiting: Duration,
}

/// What a call that overran used, for the log line.
struct Used {
    cpu: Duration,
    blocked: Duration,
}

impl ThreadTime {
    /// `None` where the kernel does not say (not Linux, or no scheduler statistics); the wall
    /// clock alone decides there.
    fn now() -> Option<ThreadTime> {
        #[cfg(target_os = "linux")]
        {
            use std::{fs::File, os::unix::fs::FileExt};
            thread_local! {
                // `/proc/thread-self` names the thread that opens it, so each thread keeps its
                // own file open: one `pread` per reading, no path lookup.
                static SCHEDSTAT: Option<File> = File::open("/proc/thread-self/schedstat").ok();
            }
            let waiting = SCHEDSTAT.with(|file| {
                let mut buffer = [0u8; 96];
                let read = file.as_ref()?.read_at(&mut buffer, 0).ok()?;
                // "<ns on a core> <ns waiting on the run queue> <timeslices>". The first field
                // lags while the thread runs (it is brought up to date at scheduler events), so
                // the running time comes from the thread's CPU clock instead; the waits are all
                // accounted by the time the thread runs again.
                let text = std::str::from_utf8(&buffer[..read]).ok()?;
                let waited = text.split_ascii_whitespace().nth(1)?.parse::<u64>().ok()?;
                Some(Duration::from_nanos(waited))
            })?;
            let mut clock = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `clock_gettime` writes one `timespec` into memory we own; the thread CPU
            // clock exists on every Linux this runs on.
            if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut clock) } != 0 {
                return None;
            }
            Some(ThreadTime {
                running: Duration::new(clock.tv_sec.max(0) as u64, clock.tv_nsec.max(0) as u32),
                waiting,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// Whether a call started at `before` that took `took` by the wall clock (more than
    /// `budget`) overran it by its own doing (see the type's docs), and if so what it used.
    fn overran(before: Option<ThreadTime>, took: Duration, budget: Duration) -> Option<Used> {
        let (Some(before), Some(after)) = (before, ThreadTime::now()) else {
            return Some(Used {
                cpu: Duration::ZERO,
                blocked: took,
            });
        };
        let cpu = after.running.saturating_sub(before.running);
        let waiting = after.waiting.saturating_sub(before.waiting);
        let blocked = took.saturating_sub(cpu).saturating_sub(waiting);
        (cpu > budget || blocked > budget).then_some(Used { cpu, blocked })
    }
}

/// What a plugin answered, checked before anything sees it: size first, then the declared
/// output schema.
fn check_output(
    tool: &ToolEntry,
    output: PluginOutput,
    limits: &Limits,
) -> Result<PluginOutput, InvokeError> {
    check_size(&output, limits.max_result_bytes)?;
    match output {
        PluginOutput::Success(output) => match tool.check_output(&output.value) {
            Ok(()) => Ok(PluginOutput::Success(output)),
            Err(problems) => Err(InvokeError::BadOutput(problems)),
        },
        tool_error => Ok(tool_error),
    }
}

/// Refuses an output whose JSON (or a tool error whose message) is over `limit` bytes. Checked
/// before the output schema, whose validation of a huge value would cost more than this count.
fn check_size(output: &PluginOutput, limit: usize) -> Result<(), InvokeError> {
    let size = match output {
        // The plugin's own text, when there is one: it is the same value, and already written.
        PluginOutput::Success(output) => match output.text() {
            Some(text) => text.len(),
            None => json_size(&output.value),
        },
        PluginOutput::ToolError(message) | PluginOutput::BadInput(message) => message.len(),
        PluginOutput::NeedsInput(requests) => crate::store::json_bytes(requests),
    };
    if size > limit {
        return Err(InvokeError::ResultTooLarge { size, limit });
    }
    Ok(())
}

/// The length of `value` serialized as compact JSON, counted without building the text.
fn json_size(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // A `Value` always serializes (its keys are strings), and the counter never fails to write.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_quick_call_overruns_by_its_own_cpu_time_or_by_blocking_not_by_being_paused() {
        let budget = Duration::from_millis(1);
        let overran = |before: Option<ThreadTime>, started: std::time::Instant| {
            ThreadTime::overran(before, started.elapsed(), budget)
        };
        let idle = (ThreadTime::now(), std::time::Instant::now());
        assert!(
            idle.0.is_some(),
            "this kernel reports per-thread scheduler statistics"
        );
        assert!(
            overran(idle.0, idle.1).is_none(),
            "doing nothing is no overrun"
        );
        let sleeping = (ThreadTime::now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(5));
        let used = overran(sleeping.0, sleeping.1).expect("a call that blocks 5 ms overran");
        assert!(
            used.blocked >= Duration::from_millis(4),
            "blocked {:?}",
            used.blocked
        );
        let spinning = (ThreadTime::now(), std::time::Instant::now());
        let mut n = 0u64;
        while spinning.1.elapsed() < Duration::from_millis(20) {
            n = std::hint::black_box(n.wrapping_add(1));
        }
        assert!(
            overran(spinning.0, spinning.1).is_some(),
            "a call that computes 20 ms overran"
        );
    }

    #[test]
    fn json_size_is_the_serialized_length() {
        for value in [
            json!(null),
            json!("héllo \"quoted\"\n"),
            json!({"a": [1, 2.5, true], "b": {"c": "d"}}),
        ] {
            assert_eq!(json_size(&value), value.to_string().len(), "{value}");
        }
    }

    #[test]
    fn an_output_over_the_limit_is_refused_with_its_size() {
        let output = PluginOutput::success(json!({"text": "x".repeat(100)}));
        let size = json_size(&json!({"text": "x".repeat(100)}));
        assert!(
            check_size(&output, size).is_ok(),
            "exactly the limit passes"
        );
        match check_size(&output, size - 1) {
            Err(InvokeError::ResultTooLarge { size: got, limit }) => {
                assert_eq!((got, limit), (size, size - 1));
            }
            other => panic!("expected ResultTooLarge, got {other:?}"),
        }
        // A plugin's own text is what is counted, as it wrote it.
        let written = PluginOutput::Success(crate::plugin::Returned::written(
            json!({"a": 1}),
            r#"{ "a" : 1 }"#.to_owned(),
        ));
        assert!(matches!(
            check_size(&written, 10),
            Err(InvokeError::ResultTooLarge { size: 11, .. })
        ));
        let error = PluginOutput::ToolError("y".repeat(50));
        assert!(matches!(
            check_size(&error, 49),
            Err(InvokeError::ResultTooLarge { size: 50, .. })
        ));
    }
}

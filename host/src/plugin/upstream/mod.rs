//! Upstreams: an MCP server, in any language, whose tools a `NAME.upstream.toml` file binds to a
//! machine. The third kind of plugin, beside libraries in this process and isolated ones: loaded,
//! replaced and removed as a library is (the same directory, watcher, catalog and checks), and
//! called through the same [`LoadedPlugin`](super::LoadedPlugin), so the gate, the actors and the
//! stores do not know which kind ran.
//!
//! # Layout
//!
//! - `file.rs`: the file, read and checked.
//! - `bindings.rs`: the manifest the file and the upstream's tools make.
//! - `link.rs`: one MCP session with the upstream (rmcp's client), and what the upstream says on
//!   its own during a call.
//! - `sessions.rs`: which session a call goes to (`shared` or `per-instance`), and reconnecting.
//! - `call.rs`: one call, its `_meta`, its deadline and what its answer means.
//! - `asking.rs`: the upstream's requests for input, through the host's ask path.
//!
//! # Threads
//!
//! Each upstream has a thread running its own tokio runtime, where its links live: a load or a
//! hot reload happens on threads that have no runtime, and a call comes from a blocking thread
//! (`invoke.rs`) and waits there, as a library call does. Dropping the last handle stops the
//! thread, which closes every link (stdio: the processes end) before it goes.

mod asking;
mod bindings;
mod call;
pub mod file;
// Sampling, roots and logging are deprecated by SEP-2577 (2026-07-28), but the 2025 servers
// that are most upstreams still use them, and their requests are answered.
#[allow(deprecated)]
mod link;
mod sessions;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, LazyLock, Mutex, PoisonError, Weak,
        atomic::{AtomicU64, Ordering},
    },
    thread,
};

use serde_json::Value;
use tokio::sync::oneshot;
use turnstile_plugin_abi::{CallContext, Manifest, PrimitiveKind};

use self::{
    bindings::ListedTool,
    call::{Failure, Target},
    file::{Sessions as Mode, Transport, UpstreamFile},
    link::Link,
    sessions::Sessions,
};
pub use self::{file::is_upstream_name, link::ListChanged};
use super::{HostCall, PluginError, PluginOutput};

/// What a load of an upstream file gives the loader.
pub(super) struct Loaded {
    pub upstream: Upstream,
    pub manifest: Manifest,
    /// Bindings refused (they name tools the upstream does not have), one line each.
    pub notes: Vec<String>,
}

/// The server's handle on one upstream; see the module docs.
pub(super) struct Upstream {
    running: Arc<Running>,
    next_call: AtomicU64,
}

/// An upstream's thread and links, shared by every load of the same file (see [`reusable`]).
struct Running {
    file: Arc<UpstreamFile>,
    /// The file's text, as loaded: a load of the same text may reuse this.
    text: String,
    runtime: tokio::runtime::Handle,
    sessions: Arc<Sessions>,
    /// Taken when the last handle drops: its end tells the upstream's thread to stop.
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

/// The upstreams running in this process, by file, so that loading a file again unchanged (the
/// upstream said its tools changed) lists the tools again on the links it has, rather than
/// starting the server anew and losing what it keeps in memory.
static RUNNING: LazyLock<Mutex<HashMap<PathBuf, Weak<Running>>>> = LazyLock::new(Mutex::default);

/// The running upstream of `path` if its file was `text` and its machine `machine` when it was
/// loaded.
fn reusable(path: &Path, text: &str, machine: &Value) -> Option<Arc<Running>> {
    let running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
    let running = running.get(path)?.upgrade()?;
    (running.text == text && running.file.machine == *machine).then_some(running)
}

impl Upstream {
    /// Reads the file at `path`, connects to its upstream and lists its tools. Blocking, until
    /// the upstream answered (or failed to). A file loaded again unchanged, while its upstream
    /// runs, is listed again on the same links.
    pub fn load(path: &Path, list_changed: ListChanged) -> Result<Loaded, PluginError> {
        let bad = |reason: String| PluginError::BadManifest {
            path: path.to_owned(),
            reason,
        };
        let unreachable = |reason: String| PluginError::UpstreamUnreachable {
            path: path.to_owned(),
            tool: "tools/list".into(),
            reason,
        };
        let (file, text) = UpstreamFile::read(path).map_err(bad)?;
        let file = Arc::new(file);
        let (running, listing) = match reusable(path, &text, &file.machine) {
            Some(running) => {
                let sessions = running.sessions.clone();
                let listing = wait(&running.runtime, async move { sessions.list().await })
                    .ok_or_else(|| unreachable("its thread ended".into()))?
                    .map_err(unreachable)?;
                (running, listing)
            }
            None => {
                let (running, listing) =
                    start(path, file, text, list_changed).map_err(|failure| match failure {
                        Started::Thread(err) => PluginError::Io {
                            path: path.to_owned(),
                            action: "cannot start the upstream's thread".into(),
                            source: err,
                        },
                        Started::Unreachable(reason) => unreachable(reason),
                    })?;
                (running, listing)
            }
        };
        let Listing {
            tools,
            primitives,
            version,
        } = listing;
        let listed = tools.iter().map(listed_tool).collect::<Vec<_>>();
        let offer = bindings::offer(&running.file, &version, &listed, &primitives);
        offer.manifest.check().map_err(bad)?;
        Ok(Loaded {
            upstream: Upstream {
                running,
                next_call: AtomicU64::new(1),
            },
            manifest: offer.manifest,
            notes: offer.notes,
        })
    }

    /// Produces the prompt (`NAME.prompt`) or resource (by its manifest name) `name`, as a
    /// library's `read` does: `request` and the output are shaped as the ABI's `ReadKind`
    /// says, which are MCP's `prompts/get` and `resources/read` shapes. Blocking. The error is
    /// the reason, which `LoadedPlugin::read` names as it names a library's.
    pub fn read(
        &self,
        kind: PrimitiveKind,
        name: &str,
        request: &Value,
        ctx: &CallContext,
    ) -> Result<PluginOutput, String> {
        let params = match kind {
            PrimitiveKind::Prompt => {
                let prompt = bindings::upstream_name(&self.running.file.name, name)
                    .ok_or("not one of this upstream's prompts")?;
                serde_json::json!({"name": prompt, "arguments": request["arguments"]})
            }
            PrimitiveKind::Resource => serde_json::json!({"uri": request["uri"]}),
        };
        let (sessions, file, ctx) = (
            self.running.sessions.clone(),
            self.running.file.clone(),
            ctx.clone(),
        );
        let reading = async move {
            let target = Target {
                sessions: &sessions,
                workflow: file.workflow(),
                timeout: file.call_timeout,
            };
            call::read(target, kind, params, &ctx).await
        };
        match wait(&self.running.runtime, reading) {
            Some(Ok(output)) => Ok(output),
            Some(Err(
                Failure::Unreachable(reason) | Failure::NoAnswer(reason) | Failure::Busy(reason),
            )) => Err(reason),
            None => Err("the upstream was stopped".into()),
        }
    }

    /// Calls the tool a client knows as `tool`. Blocking, like a library's call.
    pub fn call(
        &self,
        path: &Path,
        tool: &str,
        input: &Value,
        ctx: &CallContext,
        host: Option<Arc<HostCall>>,
    ) -> Result<PluginOutput, PluginError> {
        let Some(upstream_tool) = bindings::upstream_name(&self.running.file.name, tool) else {
            return Err(PluginError::UnknownTool {
                path: path.to_owned(),
                tool: tool.to_owned(),
            });
        };
        let number = self.next_call.fetch_add(1, Ordering::Relaxed);
        let (sessions, file) = (self.running.sessions.clone(), self.running.file.clone());
        let (upstream_tool, input, ctx) = (upstream_tool.to_owned(), input.clone(), ctx.clone());
        let running = async move {
            let target = Target {
                sessions: &sessions,
                workflow: file.workflow(),
                timeout: file.call_timeout,
            };
            call::run(target, number, &upstream_tool, &input, &ctx, host).await
        };
        let failed = |failure| {
            let (tool, path) = (tool.to_owned(), path.to_owned());
            match failure {
                Failure::Unreachable(reason) => {
                    PluginError::UpstreamUnreachable { path, tool, reason }
                }
                Failure::NoAnswer(reason) => PluginError::UpstreamNoAnswer { path, tool, reason },
                Failure::Busy(reason) => PluginError::UpstreamBusy { path, tool, reason },
            }
        };
        match wait(&self.running.runtime, running) {
            Some(outcome) => outcome.map_err(failed),
            None => Err(failed(Failure::Unreachable(
                "the upstream was stopped".into(),
            ))),
        }
    }
}

/// What the upstream `name` reached by `transport` calls itself (its version) and the tools it
/// lists (MCP `Tool` objects), for `turnstile new-upstream`. Blocking; starts and ends its own
/// runtime (a stdio upstream's process ends with it).
pub fn list_tools(name: &str, transport: &Transport) -> Result<(String, Vec<Value>), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start a runtime: {err}"))?;
    runtime.block_on(async {
        let link = Link::connect_to(name, transport, Arc::new(|| {})).await?;
        let tools = link.list_tools().await?;
        let version = link.version();
        link.close().await;
        Ok((version, tools))
    })
}

/// What an upstream lists: its tools, prompts and resources, and its version.
pub(super) struct Listing {
    pub tools: Vec<Value>,
    pub primitives: link::Primitives,
    pub version: String,
}

/// Why an upstream could not be started.
enum Started {
    Thread(std::io::Error),
    Unreachable(String),
}

/// Starts `file`'s upstream (its thread, its first link) and lists it; registers it as the
/// running upstream of `path`.
fn start(
    path: &Path,
    file: Arc<UpstreamFile>,
    text: String,
    list_changed: ListChanged,
) -> Result<(Arc<Running>, Listing), Started> {
    let (runtime, stop) = start_thread(&file.name).map_err(Started::Thread)?;
    let connecting = {
        let file = file.clone();
        let list_changed = list_changed.clone();
        async move {
            let link = Link::connect(&file, list_changed).await?;
            let listing = Listing {
                tools: link.list_tools().await?,
                primitives: link.list_primitives().await?,
                version: link.version(),
            };
            Ok::<_, String>((link, listing))
        }
    };
    let (link, listing) = wait(&runtime, connecting)
        .ok_or_else(|| Started::Unreachable("its thread ended".into()))?
        .map_err(Started::Unreachable)?;
    let sessions = {
        let _entered = runtime.enter();
        Sessions::new(file.clone(), list_changed, link)
    };
    if let Mode::PerInstance { idle, .. } = file.sessions {
        runtime.spawn(close_idle(Arc::downgrade(&sessions), idle));
    }
    let running = Arc::new(Running {
        file,
        text,
        runtime,
        sessions,
        stop: Mutex::new(Some(stop)),
    });
    RUNNING
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(path.to_owned(), Arc::downgrade(&running));
    Ok((running, listing))
}

/// Runs `future` on the upstream's runtime and waits for it on this thread; `None` if the
/// runtime went away first.
fn wait<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    future: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (done, outcome) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = done.send(future.await);
    });
    outcome.recv().ok()
}

/// Starts the thread that runs the upstream's runtime until `stop` is dropped.
fn start_thread(name: &str) -> std::io::Result<(tokio::runtime::Handle, oneshot::Sender<()>)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    thread::Builder::new()
        .name(format!("upstream-{name}"))
        .spawn(move || {
            runtime.block_on(async {
                // Err: the handle was dropped, which is the signal.
                let _ = stopped.await;
            });
            // The tasks left (links, idle sweeps) are dropped with the runtime, inside it: a
            // stdio link's process is killed on drop.
            runtime.shutdown_timeout(std::time::Duration::from_secs(2));
        })?;
    Ok((handle, stop))
}

/// Closes per-instance sessions idle for `idle`, checking a few times per `idle`, until the
/// upstream is dropped.
async fn close_idle(sessions: std::sync::Weak<Sessions>, idle: std::time::Duration) {
    let every = (idle / 4).max(std::time::Duration::from_millis(250));
    loop {
        tokio::time::sleep(every).await;
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        sessions.close_idle(idle).await;
    }
}

/// A tool as the upstream listed it (MCP `Tool`, as JSON), in the manifest's terms.
fn listed_tool(tool: &Value) -> ListedTool {
    let text = |key: &str| tool.get(key).and_then(Value::as_str).map(str::to_owned);
    let hint = |key: &str| tool["annotations"].get(key).and_then(Value::as_bool);
    ListedTool {
        name: text("name").unwrap_or_default(),
        title: text("title"),
        description: text("description"),
        input_schema: tool.get("inputSchema").cloned().unwrap_or(Value::Null),
        output_schema: tool.get("outputSchema").cloned(),
        read_only: hint("readOnlyHint"),
        destructive: hint("destructiveHint"),
        idempotent: hint("idempotentHint"),
        open_world: hint("openWorldHint"),
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // The links are closed (stdio: each process told to stop) before the thread is told to
        // end; calls in flight hold their own link, which closes when they return.
        let sessions = self.sessions.clone();
        let stop = self
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.runtime.spawn(async move {
            sessions.close_all().await;
            drop(stop);
        });
    }
}

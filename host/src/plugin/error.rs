//! Why a plugin did not load or a call did not complete.
//!
//! Every variant names the library file, so an operator looking at a log line knows which file
//! to fix. Tool-level failures that the agent should see (a business error, bad arguments) are
//! not errors here: they are [`PluginOutput::ToolError`](super::PluginOutput::ToolError).

use std::{io, path::PathBuf};

use turnstile_plugin_abi::ABI_VERSION;

/// A failure to load a plugin library or to complete a call into it.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The plugin's manifest says it is a test fixture, and the server was not started with
    /// `--allow-test-plugins`: it is not served.
    #[error(
        "{}: plugin \"{name}\" is a test fixture (its manifest says test_fixture), not served \
         without --allow-test-plugins", path.display()
    )]
    TestFixture { path: PathBuf, name: String },
    /// The file (or the directory being scanned) could not be read or copied.
    #[error("{}: {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        /// What was being done: "cannot read", "cannot copy to ...".
        action: String,
        source: io::Error,
    },

    /// The file is not a shared library for this platform (wrong magic bytes).
    #[error("{}: not a shared library", path.display())]
    NotALibrary { path: PathBuf },

    /// The dynamic loader refused the library (missing dependency, unresolved symbol, wrong
    /// architecture...); `reason` is `dlerror()`'s text.
    #[error("{}: cannot load: {reason}", path.display())]
    Open { path: PathBuf, reason: String },

    /// A required symbol is not exported.
    #[error("{}: missing symbol {symbol}", path.display())]
    MissingSymbol { path: PathBuf, symbol: &'static str },

    /// The library speaks another ABI version.
    #[error(
        "{}: ABI version {found} is not supported (this host speaks {ABI_VERSION})",
        path.display()
    )]
    UnsupportedAbi { path: PathBuf, found: u32 },

    /// The function table is unusable: null, too small, a null function pointer.
    #[error("{}: bad function table: {reason}", path.display())]
    BadTable { path: PathBuf, reason: String },

    /// The plugin's `init` failed.
    #[error("{}: plugin init failed: {message}", path.display())]
    Init { path: PathBuf, message: String },

    /// The manifest is not valid JSON of the right shape, or fails the host's checks. `reason`
    /// names the offending field (`tools[1].states: invalid type: ...`).
    #[error("{}: bad manifest: {reason}", path.display())]
    BadManifest { path: PathBuf, reason: String },

    /// The plugin has no tool of that name (not in its manifest, or refused by its `call`).
    #[error("{}: no tool named {tool}", path.display())]
    UnknownTool { path: PathBuf, tool: String },

    /// Producing a prompt's or resource's content failed (ABI 1.3 `read`): the plugin has no
    /// `read`, answered "unknown", panicked or broke the protocol. `what` is `prompt <name>` or
    /// `resource <name>`.
    #[error("{}: {what}: {reason}", path.display())]
    ReadFailed {
        path: PathBuf,
        what: String,
        reason: String,
    },

    /// An argument cannot be passed across the ABI (it contains a NUL byte).
    #[error("{}: tool {tool}: cannot pass {what}: it contains a NUL byte", path.display())]
    BadArgument {
        path: PathBuf,
        tool: String,
        what: &'static str,
    },

    /// The tool panicked. The plugin caught the panic and is still usable; the message is the
    /// panic's. The host should report a tool failure without firing the transition.
    #[error("{}: tool {tool} panicked: {message}", path.display())]
    Panicked {
        path: PathBuf,
        tool: String,
        message: String,
    },

    /// The plugin is isolated (it runs in a process of its own) and that process could not be
    /// started, or did not load the library as this process did.
    #[error("{}: cannot run in a process of its own: {reason}", path.display())]
    Isolation { path: PathBuf, reason: String },

    /// The plugin is isolated and its process ended (crashed, was killed) while the call was in
    /// flight, or could not be reached; `reason` says how. The process is restarted; the call
    /// fired nothing.
    #[error("{}: tool {tool}: {reason}", path.display())]
    Crashed {
        path: PathBuf,
        tool: String,
        reason: String,
    },

    /// An upstream could not be reached: its process did not start or answer, its URL did not
    /// answer, or it is in its backoff after failing. The call never reached it: nothing ran
    /// there, nothing fired.
    #[error("{}: {tool}: the upstream could not be reached: {reason}", path.display())]
    UpstreamUnreachable {
        path: PathBuf,
        tool: String,
        reason: String,
    },

    /// An upstream was sent the call and gave no answer (it ended, the connection broke, or
    /// `call_timeout_s` passed): the call may have run there. Nothing fired here.
    #[error("{}: tool {tool}: sent to the upstream, no answer: {reason}", path.display())]
    UpstreamNoAnswer {
        path: PathBuf,
        tool: String,
        reason: String,
    },

    /// Every per-instance session of an upstream is taken by a call in flight (`max_sessions`):
    /// nothing ran.
    #[error("{}: tool {tool}: {reason}", path.display())]
    UpstreamBusy {
        path: PathBuf,
        tool: String,
        reason: String,
    },

    /// The plugin broke the protocol on a call: output that is not JSON, an unknown status,
    /// an error without `{"message"}`, or a status of [`Status::INTERNAL`].
    ///
    /// [`Status::INTERNAL`]: turnstile_plugin_abi::abi::Status::INTERNAL
    #[error("{}: tool {tool}: {reason}", path.display())]
    BadResponse {
        path: PathBuf,
        tool: String,
        reason: String,
    },
}

impl PluginError {
    /// The library file the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            PluginError::Io { path, .. }
            | PluginError::TestFixture { path, .. }
            | PluginError::NotALibrary { path }
            | PluginError::Open { path, .. }
            | PluginError::MissingSymbol { path, .. }
            | PluginError::UnsupportedAbi { path, .. }
            | PluginError::BadTable { path, .. }
            | PluginError::Init { path, .. }
            | PluginError::BadManifest { path, .. }
            | PluginError::UnknownTool { path, .. }
            | PluginError::ReadFailed { path, .. }
            | PluginError::BadArgument { path, .. }
            | PluginError::Panicked { path, .. }
            | PluginError::Isolation { path, .. }
            | PluginError::Crashed { path, .. }
            | PluginError::UpstreamUnreachable { path, .. }
            | PluginError::UpstreamNoAnswer { path, .. }
            | PluginError::UpstreamBusy { path, .. }
            | PluginError::BadResponse { path, .. } => path,
        }
    }
}

//! [`CallContext`]: what the host says about a call beside its arguments, and
//! [`PrimitiveKind`], what a `read` is asked for. These are the Rust meaning of the ABI's
//! [`RawCallContext`](crate::abi::RawCallContext) and [`ReadKind`](crate::abi::ReadKind): the
//! host builds them to make a call, a Rust plugin receives them, so both sides share this one
//! definition.
//!
//! It must not call into either side: a context is data, and the host services it carries are
//! in `host_services.rs`.

use serde_json::Value;

use crate::host_services::HostServices;

/// What a plugin's `read` entry point (ABI 1.3) is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrimitiveKind {
    /// A prompt (`prompts/get`).
    Prompt,
    /// A resource, fixed or from a template (`resources/read`).
    Resource,
}

impl PrimitiveKind {
    /// The ABI's code for this kind.
    pub const fn raw(self) -> crate::abi::ReadKind {
        match self {
            PrimitiveKind::Prompt => crate::abi::ReadKind::PROMPT,
            PrimitiveKind::Resource => crate::abi::ReadKind::RESOURCE,
        }
    }

    /// The kind the ABI's code names, if any.
    pub fn from_raw(raw: crate::abi::ReadKind) -> Option<PrimitiveKind> {
        match raw {
            crate::abi::ReadKind::PROMPT => Some(PrimitiveKind::Prompt),
            crate::abi::ReadKind::RESOURCE => Some(PrimitiveKind::Resource),
            _ => None,
        }
    }

    /// `"prompt"` or `"resource"`, for messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            PrimitiveKind::Prompt => "prompt",
            PrimitiveKind::Resource => "resource",
        }
    }
}

/// What the host says about the call, beside the arguments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallContext {
    /// A unique id for this call (logs, idempotency keys).
    pub call_id: String,
    /// The handle of the workflow instance the call runs against; empty when the tool is bound
    /// to no workflow.
    pub handle: String,
    /// The instance's current state value (XState state value: `"draft"` or
    /// `{"parent": "child"}`); `null` when there is no instance.
    pub state: Value,
    /// Logging to the client, progress and cancellation, when the host offers them (ABI 1.1);
    /// on an older host every service is a no-op.
    pub host: HostServices,
    /// The instance's machine context (XState `context`) before this call: what guards and
    /// assignments read, so a handler can act on what earlier calls recorded. `null` when the
    /// tool is bound to no workflow, the machine declares no context, or the host is older than
    /// ABI 1.2.
    pub context: Value,
    /// A key that is the same for every run of this tool on this instance at its current
    /// version, on any server, and different for anything else; empty when the tool is bound to
    /// no workflow or the host is older than ABI 1.4. Pass it as the idempotency key of the
    /// outside services a handler calls (a payment provider's `Idempotency-Key`): a transition
    /// that a paused server started and another server took over then acts on the outside world
    /// once.
    pub idempotency_key: String,
    /// What the handler may ask for and what it has been told (ABI 1.4): read it through
    /// [`CallContext::answer`], [`CallContext::can_ask`] and [`CallContext::ask`] (see
    /// `asking.rs`). `null` when the host cannot ask for this call.
    pub asking: Value,
}

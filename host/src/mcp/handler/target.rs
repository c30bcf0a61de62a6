//! Which instance a request is about (DESIGN behaviour 5).
//!
//! In session mode it is the session's own instance of the tool's workflow. In handle mode it is
//! the instance named by the handle argument of `tools/call` (or, for any request, the request's
//! `_meta` under the same key); a call without a handle to a tool that starts the workflow mints
//! a new instance, and any other call without one is refused: an unknown or malformed handle is
//! never turned into a silent new instance.

use rmcp::model::{JsonObject, RequestMetaObject, Tool};
use serde_json::{Value, json};

use super::clip::clip;
use crate::{
    actors::{InstanceKey, SessionId, Tenant},
    catalog::{ToolEntry, Workflow},
    gate,
};

/// The argument name used when `--state-handle-key` is given without one.
pub const DEFAULT_HANDLE_KEY: &str = "handle";

/// Handle mode's settings.
#[derive(Debug, Clone)]
pub struct HandleMode {
    /// The argument (and `_meta`) name that carries a handle.
    pub key: String,
}

/// The instance a call runs on.
pub enum Target {
    Existing(InstanceKey),
    /// A new instance, to be created before the call runs on it.
    Mint(InstanceKey),
}

/// Why a call has no instance to run on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoTarget {
    /// The handle is malformed, or names an instance of another workflow.
    #[error("{0}")]
    InvalidHandle(String),
    /// The tool acts on an existing instance and none was named.
    #[error("a handle is required")]
    HandleRequired { key: String, starters: Vec<String> },
}

/// Finds the instance for a call of `tool` (bound to `workflow`). In handle mode the handle is
/// removed from `arguments`, since it is the host's argument and not the plugin's, and the
/// instance is `tenant`'s (the caller's principal, with authentication on).
pub fn resolve(
    handles: Option<&HandleMode>,
    session: &SessionId,
    tenant: Option<&Tenant>,
    tool: &ToolEntry,
    workflow: &Workflow,
    arguments: &mut JsonObject,
    meta: &RequestMetaObject,
) -> Result<Target, NoTarget> {
    let Some(mode) = handles else {
        return Ok(Target::Existing(InstanceKey::for_session(
            session,
            &workflow.id,
        )));
    };
    let named = match arguments.remove(&mode.key) {
        Some(Value::String(handle)) => Some(handle),
        Some(other) => {
            return Err(NoTarget::InvalidHandle(format!(
                "the {} argument must be a string, not {}",
                mode.key,
                clip(&other.to_string())
            )));
        }
        None => meta
            .get(&mode.key)
            .and_then(Value::as_str)
            .map(str::to_string),
    };
    match named {
        Some(handle) => {
            let key = InstanceKey::from_handle(&handle)
                .map_err(|error| NoTarget::InvalidHandle(error.to_string()))?;
            if *key.workflow != *workflow.id {
                return Err(NoTarget::InvalidHandle(format!(
                    "{} is an instance of workflow {}, and {} belongs to workflow {}",
                    clip(&handle),
                    clip(&key.workflow),
                    tool.name(),
                    workflow.id
                )));
            }
            Ok(Target::Existing(key.owned_by(tenant)))
        }
        None if gate::starts_instance(tool, workflow) => Ok(Target::Mint(
            InstanceKey::mint(&workflow.id).owned_by(tenant),
        )),
        None => Err(NoTarget::HandleRequired {
            key: mode.key.clone(),
            starters: gate::starters(workflow),
        }),
    }
}

impl HandleMode {
    /// Handle mode under the default key, for requests that have no session to keep state in.
    pub fn sessionless_default() -> &'static HandleMode {
        static MODE: std::sync::OnceLock<HandleMode> = std::sync::OnceLock::new();
        MODE.get_or_init(|| HandleMode {
            key: DEFAULT_HANDLE_KEY.to_string(),
        })
    }

    /// The handles named in a request's `_meta` under the handle key (one string, or a list),
    /// as `tenant`'s instances, each once. More than `max` different handles is refused before
    /// any is looked up: a request must not cost a lookup per copy it carries.
    pub fn handles_in(
        &self,
        meta: &RequestMetaObject,
        tenant: Option<&Tenant>,
        max: usize,
    ) -> Result<Vec<InstanceKey>, String> {
        let named: Vec<&str> = match meta.get(&self.key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(handle)) => vec![handle.as_str()],
            Some(Value::Array(handles)) => handles
                .iter()
                .map(|handle| {
                    handle
                        .as_str()
                        .ok_or_else(|| format!("_meta.{}: handles must be strings", self.key))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(format!(
                    "_meta.{} must be a handle or a list of handles, not {other}",
                    self.key
                ));
            }
        };
        let mut distinct: Vec<&str> = Vec::with_capacity(named.len().min(max));
        for handle in named {
            if distinct.contains(&handle) {
                continue;
            }
            if distinct.len() == max {
                return Err(format!(
                    "_meta.{} names more than {max} handles (--max-handles-per-request)",
                    self.key
                ));
            }
            distinct.push(handle);
        }
        distinct
            .into_iter()
            .map(|handle| {
                InstanceKey::from_handle(handle)
                    .map(|key| key.owned_by(tenant))
                    .map_err(|error| error.to_string())
            })
            .collect()
    }

    /// Adds the handle property to a listed tool's input schema: optional on tools that start
    /// an instance (omit it to start a new one), required on the others.
    pub fn add_handle_property(&self, mut tool: Tool, starts_instance: bool) -> Tool {
        let mut schema = (*tool.input_schema).clone();
        let description = if starts_instance {
            "Handle of an existing workflow instance. Omit it to start a new instance; the result \
             returns the new handle. Pass that handle to every later call on this instance."
        } else {
            "Handle of the workflow instance to act on, as returned by the call that started it."
        };
        let properties = schema.entry("properties").or_insert_with(|| json!({}));
        if let Value::Object(properties) = properties {
            properties.insert(
                self.key.clone(),
                json!({ "type": "string", "description": description }),
            );
        }
        if !starts_instance {
            let required = schema.entry("required").or_insert_with(|| json!([]));
            if let Value::Array(required) = required
                && !required
                    .iter()
                    .any(|name| name == &Value::String(self.key.clone()))
            {
                required.push(Value::String(self.key.clone()));
            }
        }
        tool.input_schema = schema.into();
        // The result carries the handle in `structuredContent` too (`reply::with_handle`): say so
        // in the published output schema, or a strict client would reject the result.
        if let Some(output) = &tool.output_schema {
            let mut output = (**output).clone();
            if let Value::Object(properties) =
                output.entry("properties").or_insert_with(|| json!({}))
            {
                properties.insert(
                    self.key.clone(),
                    json!({ "type": "string", "description": "Handle of the workflow instance." }),
                );
            }
            tool.output_schema = Some(output.into());
        }
        tool
    }
}

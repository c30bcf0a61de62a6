//! `completion/complete` (issue 40): values for a prompt's argument or a resource template's
//! variable, as a client offers them while a person types.
//!
//! - A prompt's arguments and a template's variables are completed by their plugin (ABI 1.4's
//!   `ReadKind::COMPLETION`), told of the instance the client works on, as a `prompts/get` is.
//!   A prompt bound to workflow states completes nothing while the instance is in none of them:
//!   what is not offered is not completed.
//! - `{handle}` of an instance template (a plugin's `invoice://{handle}`, the host's
//!   `turnstile://invoice/{handle}`) is the host's: the caller's own live instances of that
//!   workflow, newest first. With authentication, those its principal holds in the store (the
//!   workflow's handle keys that fit what was typed, keeping those whose key names the
//!   principal's tenant: another principal's never appear); without, only those its session has
//!   used, since a handle is then the only key to an instance and listing others' would hand
//!   them out.
//!
//! Every answer is bounded: at most [`MAX_COMPLETIONS`] values, from at most
//! [`MAX_EXAMINED`] stored keys, of which at most [`MAX_LOADED`] records are read.

use std::collections::BTreeSet;

use rmcp::{
    ErrorData, RoleServer,
    model::{ArgumentInfo, CompleteRequestParams, CompleteResult, CompletionInfo, Reference},
    service::RequestContext,
};
use serde_json::{Value, json};
use turnstile_plugin_abi::HANDLE_VARIABLE;

use super::{instance_resource, reply, server::TurnstileServer};
use crate::{
    actors::{InstanceKey, Owner},
    catalog::{Bound, PromptEntry},
    gate, invoke,
    plugin::{LoadedPlugin, MAX_COMPLETIONS},
    store::{HANDLE_PREFIX, owner_of},
};

/// The most stored keys one completion of `{handle}` looks at.
pub const MAX_EXAMINED: usize = 2_000;

/// The most candidate instances one completion of `{handle}` reads (to learn which are live, and
/// when each last moved).
pub const MAX_LOADED: usize = 200;

impl TurnstileServer {
    /// `completion/complete`.
    pub(in crate::mcp) async fn answer_complete(
        &self,
        request: CompleteRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let others = request
            .context
            .and_then(|context| context.arguments)
            .unwrap_or_default();
        let values = match &request.r#ref {
            Reference::Prompt(prompt) => {
                let catalog = self.shared.catalog.current();
                let Some(entry) = catalog.prompt(&prompt.name).cloned() else {
                    return Err(reply::unknown_prompt(&prompt.name));
                };
                self.complete_prompt(&entry, &request.argument, others, context)
                    .await?
            }
            Reference::Resource(template) => {
                self.complete_template(&template.uri, &request.argument, others, context)
                    .await?
            }
            other => {
                return Err(reply::uncompletable_reference(other.reference_type()));
            }
        };
        let total = values.len();
        let shown: Vec<String> = values.into_iter().take(MAX_COMPLETIONS).collect();
        let info =
            CompletionInfo::with_pagination(shown, Some(total as u32), total > MAX_COMPLETIONS)
                .map_err(|error| reply::completions_unlisted(&error))?;
        Ok(CompleteResult::new(info))
    }

    /// A prompt's argument: by its plugin, while the prompt is offered.
    async fn complete_prompt(
        &self,
        prompt: &PromptEntry,
        argument: &ArgumentInfo,
        others: impl IntoIterator<Item = (String, String)>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Vec<String>, ErrorData> {
        let name = &prompt.manifest.name;
        if !prompt
            .manifest
            .arguments
            .iter()
            .any(|a| a.name == argument.name)
        {
            return Err(reply::unknown_completion_argument(
                "prompt",
                name,
                &argument.name,
            ));
        }
        let subject = match prompt.workflow() {
            None => None,
            Some(workflow) => {
                let catalog = self.shared.catalog.current();
                let subject = self.subject(&catalog, workflow, context).await?;
                if gate::withheld_prompt(&catalog, prompt, workflow, &subject.snapshot).is_some() {
                    return Ok(Vec::new());
                }
                Some(subject)
            }
        };
        let request = completion_request("prompt", argument, others);
        let ctx = subject.map(|subject| subject.context()).unwrap_or_default();
        self.plugin_completions(prompt.plugin.clone(), name, request, ctx)
            .await
    }

    /// A resource template's variable: `{handle}` of an instance template by the host, the
    /// rest by the template's plugin.
    async fn complete_template(
        &self,
        uri_template: &str,
        argument: &ArgumentInfo,
        others: impl IntoIterator<Item = (String, String)>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Vec<String>, ErrorData> {
        let catalog = self.shared.catalog.current();
        // The host's own `turnstile://{workflow}/{handle}` of a loaded workflow.
        let host_workflow = catalog
            .workflows()
            .find(|workflow| instance_resource::template(&workflow.id) == uri_template)
            .map(|workflow| workflow.id.clone());
        if let Some(workflow) = host_workflow {
            if argument.name != HANDLE_VARIABLE {
                return Err(reply::unknown_completion_argument(
                    "resource template",
                    uri_template,
                    &argument.name,
                ));
            }
            return self
                .complete_handles(&workflow, &argument.value, context)
                .await;
        }
        let Some(template) = catalog
            .templates()
            .find(|template| template.manifest.uri_template == uri_template)
            .cloned()
        else {
            return Err(reply::unknown_template(uri_template));
        };
        if !uri_template.contains(&format!("{{{}}}", argument.name)) {
            return Err(reply::unknown_completion_argument(
                "resource template",
                uri_template,
                &argument.name,
            ));
        }
        if argument.name == HANDLE_VARIABLE
            && template.is_instance()
            && let Some(workflow) = template.workflow()
        {
            return self
                .complete_handles(workflow, &argument.value, context)
                .await;
        }
        let request = completion_request("resource", argument, others);
        self.plugin_completions(
            template.plugin.clone(),
            &template.manifest.name,
            request,
            Default::default(),
        )
        .await
    }

    async fn plugin_completions(
        &self,
        plugin: std::sync::Arc<LoadedPlugin>,
        name: &str,
        request: Value,
        ctx: crate::plugin::CallContext,
    ) -> Result<Vec<String>, ErrorData> {
        invoke::complete(plugin, name, request, ctx, &self.shared.call_limits)
            .await
            .map_err(|error| reply::completion_failed(name, &error))
    }

    /// The caller's own live instances of `workflow` whose handle starts with `typed`, newest
    /// first (see the module docs for whose they are).
    async fn complete_handles(
        &self,
        workflow: &str,
        typed: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Vec<String>, ErrorData> {
        let tenant = self.caller(context).tenant();
        let mut keys: BTreeSet<String> = BTreeSet::new();
        if !self.caller(context).is_sessionless() {
            for key in self.session().touched() {
                if let Owner::Handle(handle) = &key.owner
                    && *key.workflow == *workflow
                    && handle.starts_with(typed)
                {
                    keys.insert(key.store_key());
                }
            }
        }
        if let Some(tenant) = &tenant {
            let stem = format!("{workflow}-");
            let prefix = if stem.starts_with(typed) {
                format!("{HANDLE_PREFIX}{stem}")
            } else {
                format!("{HANDLE_PREFIX}{typed}")
            };
            let store = &self.shared.store;
            let mut after: Option<String> = None;
            let mut examined = 0;
            while examined < MAX_EXAMINED {
                let page = store
                    .list_keys(&prefix, after.as_deref(), 500)
                    .await
                    .map_err(|error| reply::completion_failed(typed, &error))?;
                let Some(last) = page.last().cloned() else {
                    break;
                };
                examined += page.len();
                keys.extend(
                    page.into_iter()
                        .filter(|key| owner_of(key) == Some(tenant.as_str())),
                );
                after = Some(last);
            }
        }
        // Newest first, live only: each candidate's record says when it last moved and whether
        // it is done.
        let loads = keys.into_iter().take(MAX_LOADED).filter_map(|key| {
            let instance = InstanceKey::from_store_key(&key)?;
            let Owner::Handle(handle) = instance.owner else {
                return None;
            };
            (*instance.workflow == *workflow).then_some(async move {
                let record = self.shared.store.load(&key).await.ok().flatten()?;
                let done = record.snapshot.get("status") == Some(&json!("done"));
                (!done).then_some((record.updated_at_ms, handle.to_string()))
            })
        });
        let mut live: Vec<(u64, String)> = futures_util::future::join_all(loads)
            .await
            .into_iter()
            .flatten()
            .collect();
        live.sort_by(|a, b| b.cmp(a));
        Ok(live.into_iter().map(|(_, handle)| handle).collect())
    }
}

/// What a plugin's completion is asked (ABI 1.4 `ReadKind::COMPLETION`).
fn completion_request(
    reference: &str,
    argument: &ArgumentInfo,
    others: impl IntoIterator<Item = (String, String)>,
) -> Value {
    let others: serde_json::Map<String, Value> = others
        .into_iter()
        .map(|(name, value)| (name, json!(value)))
        .collect();
    json!({
        "ref": reference,
        "argument": {"name": argument.name, "value": argument.value},
        "arguments": others,
    })
}

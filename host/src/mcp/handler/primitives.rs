//! Prompts and resources for one session: `prompts/list`, `prompts/get`, `resources/list`,
//! `resources/templates/list`, `resources/read`, `resources/subscribe` and `unsubscribe`.
//!
//! They are gated exactly as tools are (issue 15): a listing shows (on 2026-07-28 without the
//! gated-lists extension: the whole catalog; otherwise) what the caller's instances
//! are offered in their current states (session mode: the session's instance of each workflow;
//! handle mode: the instances named in `_meta`, or else those the session touched plus what a
//! new instance is offered), and a get or read outside its states is refused with the state
//! and what is available. An instance resource (a template with `{handle}`) names its instance
//! in its URI: `session` for the session's own, else a handle, found under the caller's tenant
//! like any handle, so a caller that does not hold it finds nothing. The host's own instance
//! resource of every workflow (`turnstile://{workflow}/{handle}`, see `instance_resource.rs`)
//! is found the same way, and offered in every state.
//!
//! It must not decide visibility (that is `gate`) or build replies (that is `reply`). Reads are
//! served from a view of the instance taken when the request arrives: they change nothing, so
//! they do not queue behind the instance's calls.

use std::collections::{BTreeMap, HashSet};

use rmcp::{
    ErrorData, RoleServer,
    model::{
        CacheScope, GetPromptRequestParams, GetPromptResponse, GetPromptResult, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams,
        ReadResourceResult,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use super::{
    asking::{self, Asking, CallIdentity},
    clip::clip,
    instance_resource, reply,
    server::TurnstileServer,
};
use crate::{
    actors::{InstanceKey, Owner},
    catalog::{Bound, Catalog, PromptEntry, SESSION_TOKEN, TemplateEntry},
    gate, invoke,
    plugin::{CallContext, LoadedPlugin, PrimitiveKind},
    statechart::Snapshot,
};

/// One instance as a listing sees it: its workflow, its state, and how its instance resources
/// name it (`None` for what a new instance, not yet started, is offered).
struct Seen {
    workflow: String,
    snapshot: Snapshot,
    token: Option<String>,
}

/// The instance a get or read is about, as it stands.
pub(in crate::mcp) struct Subject {
    key: Option<InstanceKey>,
    pub(in crate::mcp) snapshot: Snapshot,
    /// How its instance resources name it.
    token: Option<String>,
}

impl Subject {
    /// What the plugin is told of the instance (no call id of a tool call: a fresh one).
    pub(in crate::mcp) fn context(&self) -> CallContext {
        CallContext {
            call_id: uuid::Uuid::new_v4().to_string(),
            handle: self
                .key
                .as_ref()
                .map(InstanceKey::handle)
                .unwrap_or_default(),
            state: self.snapshot.value(),
            context: self.snapshot.context().clone(),
            ..CallContext::default()
        }
    }
}

impl TurnstileServer {
    /// The instances this request sees, as `tools/list` sees them (and watching them, as it
    /// does, so the session hears when their lists change).
    async fn seen(&self, context: &RequestContext<RoleServer>) -> Result<Vec<Seen>, ErrorData> {
        let catalog = self.shared.catalog.current();
        let mut seen = Vec::new();
        let Some(mode) = self.handle_mode(context) else {
            for workflow in catalog.workflows() {
                let key = InstanceKey::for_session(&self.session().id, &workflow.id);
                let view = self.view(&key, context).await?;
                seen.push(Seen {
                    workflow: workflow.id.clone(),
                    snapshot: view.snapshot,
                    token: Some(SESSION_TOKEN.to_owned()),
                });
            }
            return Ok(seen);
        };
        let (views, listing_named) = self.listed_instances(mode, &catalog, context).await?;
        for (key, view) in views {
            seen.push(Seen {
                workflow: key.workflow.to_string(),
                snapshot: view.snapshot,
                token: Some(key.handle()),
            });
        }
        if !listing_named {
            for workflow in catalog.workflows() {
                seen.push(Seen {
                    workflow: workflow.id.clone(),
                    snapshot: workflow.machine.initial_snapshot(),
                    token: None,
                });
            }
        }
        Ok(seen)
    }

    pub(in crate::mcp) async fn answer_list_prompts(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let catalog = self.shared.catalog.current();
        if !self.lists_follow_instances(context) {
            let (ttl_ms, scope) = self.catalog_list_caching(context);
            let prompts = catalog.prompts().map(|prompt| reply::listed_prompt(prompt));
            return Ok(ListPromptsResult::with_all_items(prompts.collect())
                .with_ttl_ms(ttl_ms)
                .with_cache_scope(scope));
        }
        let mut names = HashSet::new();
        let mut prompts: Vec<_> = catalog
            .prompts()
            .filter(|prompt| prompt.workflow().is_none())
            .inspect(|prompt| {
                names.insert(prompt.manifest.name.clone());
            })
            .map(|prompt| reply::listed_prompt(prompt))
            .collect();
        for seen in self.seen(context).await? {
            for prompt in gate::offer(&catalog, &seen.workflow, &seen.snapshot).prompts {
                if names.insert(prompt.manifest.name.clone()) {
                    prompts.push(reply::listed_prompt(&prompt));
                }
            }
        }
        // Like the tool list, it depends on the caller's state: never from a client's cache.
        Ok(ListPromptsResult::with_all_items(prompts)
            .with_ttl_ms(0)
            .with_cache_scope(CacheScope::Private))
    }

    pub(in crate::mcp) async fn answer_list_resources(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let catalog = self.shared.catalog.current();
        if !self.lists_follow_instances(context) {
            // Instances' own resources are found through the templates: listing them would
            // make the list follow the instances.
            let (ttl_ms, scope) = self.catalog_list_caching(context);
            let resources = catalog
                .resources()
                .map(|resource| reply::listed_resource(resource));
            return Ok(ListResourcesResult::with_all_items(resources.collect())
                .with_ttl_ms(ttl_ms)
                .with_cache_scope(scope));
        }
        let mut uris = HashSet::new();
        let mut resources: Vec<_> = catalog
            .resources()
            .filter(|resource| resource.workflow().is_none())
            .inspect(|resource| {
                uris.insert(resource.manifest.uri.clone());
            })
            .map(|resource| reply::listed_resource(resource))
            .collect();
        for seen in self.seen(context).await? {
            let offer = gate::offer(&catalog, &seen.workflow, &seen.snapshot);
            for resource in offer.resources {
                if uris.insert(resource.manifest.uri.clone()) {
                    resources.push(reply::listed_resource(&resource));
                }
            }
            // One resource per instance of each instance template it is offered.
            let Some(token) = &seen.token else { continue };
            for template in offer.templates.iter().filter(|t| t.is_instance()) {
                let uri = template.instance_uri(token);
                if uris.insert(uri.clone()) {
                    resources.push(reply::listed_instance_resource(template, uri));
                }
            }
        }
        Ok(ListResourcesResult::with_all_items(resources)
            .with_ttl_ms(0)
            .with_cache_scope(CacheScope::Private))
    }

    pub(in crate::mcp) async fn answer_list_templates(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let catalog = self.shared.catalog.current();
        if !self.lists_follow_instances(context) {
            let (ttl_ms, scope) = self.catalog_list_caching(context);
            let templates = catalog
                .templates()
                .map(|template| reply::listed_template(template))
                .chain(host_templates(&catalog));
            return Ok(
                ListResourceTemplatesResult::with_all_items(templates.collect())
                    .with_ttl_ms(ttl_ms)
                    .with_cache_scope(scope),
            );
        }
        let mut listed = HashSet::new();
        let mut templates: Vec<_> = catalog
            .templates()
            .filter(|template| template.workflow().is_none())
            .inspect(|template| {
                listed.insert(template.manifest.uri_template.clone());
            })
            .map(|template| reply::listed_template(template))
            .collect();
        for seen in self.seen(context).await? {
            for template in gate::offer(&catalog, &seen.workflow, &seen.snapshot).templates {
                if listed.insert(template.manifest.uri_template.clone()) {
                    templates.push(reply::listed_template(&template));
                }
            }
        }
        // The host's own instance resources are offered in every state.
        templates.extend(host_templates(&catalog));
        Ok(ListResourceTemplatesResult::with_all_items(templates)
            .with_ttl_ms(0)
            .with_cache_scope(CacheScope::Private))
    }

    pub(in crate::mcp) async fn answer_get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let catalog = self.shared.catalog.current();
        let Some(prompt) = catalog.prompt(&request.name).cloned() else {
            return Err(reply::unknown_prompt(&request.name));
        };
        let arguments = request.arguments.unwrap_or_default();
        // A renderer that may ask is told what it may ask, and runs again with the answers
        // (`asking.rs`), as a tool's handler does.
        let mut asking = if prompt.manifest.asks {
            let handle_in_meta = self
                .handle_mode(context)
                .and_then(|mode| context.meta.get(&mode.key));
            let identity = CallIdentity::new(
                "prompts/get",
                &request.name,
                &arguments,
                handle_in_meta,
                self.caller(context).principal_name().as_deref(),
            );
            Some(
                Asking::start(
                    context,
                    &self.shared.state_seal,
                    identity,
                    request.input_responses,
                    request.request_state.as_deref(),
                    false,
                )
                .map_err(|why| reply::unusable_answers(&why))?,
            )
        } else {
            None
        };
        let problems = argument_problems(&prompt, &arguments);
        if !problems.is_empty() {
            return Err(reply::invalid_prompt_arguments(&request.name, &problems));
        }
        let subject = match prompt.workflow() {
            None => None,
            Some(workflow) => {
                let subject = self.subject(&catalog, workflow, context).await?;
                if let Some(withheld) =
                    gate::withheld_prompt(&catalog, &prompt, workflow, &subject.snapshot)
                {
                    return Err(reply::withheld(&withheld));
                }
                Some(subject)
            }
        };
        let name = prompt.manifest.name.clone();
        let deadline = std::time::Instant::now() + self.shared.call_limits.timeout;
        loop {
            let output = self
                .read_asking(
                    prompt.plugin.clone(),
                    PrimitiveKind::Prompt,
                    &name,
                    json!({ "arguments": arguments }),
                    subject.as_ref(),
                    asking.as_ref().map_or(Value::Null, Asking::plugin_view),
                )
                .await?;
            let (Some(asking), crate::plugin::PluginOutput::NeedsInput(requests)) =
                (asking.as_mut(), &output)
            else {
                return reply::prompt_result(&name, output).map(Into::into);
            };
            let next = asking
                .next(requests.clone(), context, &self.shared.state_seal, deadline)
                .await;
            match next {
                asking::Next::RunAgain => continue,
                asking::Next::InputRequired(result) => return Ok(result.into()),
                asking::Next::Rerouted => {
                    return Ok(GetPromptResult::new(Vec::new()).into());
                }
                asking::Next::Unavailable(requests) => {
                    return Err(reply::prompt_input_unavailable(
                        &name,
                        &reply::needed(&requests),
                    ));
                }
                asking::Next::Undeclared(requests) => {
                    return Err(reply::missing_client_capability(
                        &name,
                        &reply::needed(&requests),
                        asking::required_capabilities(&requests),
                    ));
                }
                asking::Next::Failed(why) => {
                    return Err(reply::prompt_input_unavailable(&name, &why));
                }
                asking::Next::Cancelled => {
                    return Err(reply::prompt_input_unavailable(
                        &name,
                        "the request was cancelled",
                    ));
                }
            }
        }
    }

    pub(in crate::mcp) async fn answer_read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, ErrorData> {
        let catalog = self.shared.catalog.current();
        let uri = request.uri;
        if let Some((workflow, token)) = instance_resource::parse(&uri) {
            return self
                .read_instance_resource(&catalog, workflow, token, &uri, context)
                .await;
        }
        if let Some(resource) = catalog.resource(&uri).cloned() {
            let subject = match resource.workflow() {
                None => None,
                Some(workflow) => {
                    let subject = self.subject(&catalog, workflow, context).await?;
                    let withheld = gate::withheld_resource(
                        &catalog,
                        &*resource,
                        &uri,
                        workflow,
                        &subject.snapshot,
                        subject.token.as_deref(),
                    );
                    if let Some(withheld) = withheld {
                        return Err(reply::withheld(&withheld));
                    }
                    Some(subject)
                }
            };
            let manifest = &resource.manifest;
            let request = json!({ "uri": uri, "variables": {} });
            let output = self
                .read(
                    resource.plugin.clone(),
                    PrimitiveKind::Resource,
                    &manifest.name,
                    request,
                    subject.as_ref(),
                )
                .await?;
            return reply::resource_result(&uri, manifest.mime_type.as_deref(), output);
        }
        let Some((template, variables)) = catalog.template_for(&uri) else {
            return Err(reply::resource_not_found(&uri));
        };
        let template = template.clone();
        let subject = match template.workflow() {
            None => None,
            Some(workflow) => {
                let subject = if template.is_instance() {
                    self.instance_subject(&template, &variables, &uri, context)
                        .await?
                } else {
                    self.subject(&catalog, workflow, context).await?
                };
                let withheld = gate::withheld_resource(
                    &catalog,
                    &*template,
                    &uri,
                    workflow,
                    &subject.snapshot,
                    subject.token.as_deref(),
                );
                if let Some(withheld) = withheld {
                    return Err(reply::withheld(&withheld));
                }
                Some(subject)
            }
        };
        let manifest = &template.manifest;
        let request = json!({ "uri": uri, "variables": variables });
        let output = self
            .read(
                template.plugin.clone(),
                PrimitiveKind::Resource,
                &manifest.name,
                request,
                subject.as_ref(),
            )
            .await?;
        reply::resource_result(&uri, manifest.mime_type.as_deref(), output)
    }

    /// `resources/subscribe`: for an instance resource, `resources/updated` each time its
    /// instance moves (and the lists' changes, as for any watcher). Any other resource that
    /// exists is accepted too; only a plugin reload changes those, and that is announced as
    /// `resources/list_changed`.
    pub(in crate::mcp) async fn answer_subscribe(
        &self,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let key = match self.instance_resource_key(uri, context).await? {
            InstanceResource::Instance(key) => key,
            InstanceResource::Static => return Ok(()),
        };
        self.shared.runtime.subscribe_resource(
            &self.session().id,
            self.session().listener(&context.peer),
            key,
            uri,
        );
        Ok(())
    }

    /// What `uri` names, for a subscription: the instance of an instance resource (the host's
    /// `turnstile://…`, or a plugin's template with `{handle}`), if the caller holds it, or a
    /// resource whose content no transition changes. -32002 for what names nothing of the
    /// caller's.
    pub(in crate::mcp) async fn instance_resource_key(
        &self,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<InstanceResource, ErrorData> {
        let catalog = self.shared.catalog.current();
        if let Some((workflow, token)) = instance_resource::parse(uri) {
            let (key, _) = self.instance_view(workflow, token, uri, context).await?;
            return Ok(InstanceResource::Instance(key));
        }
        if catalog.resource(uri).is_some() {
            return Ok(InstanceResource::Static);
        }
        let Some((template, variables)) = catalog.template_for(uri) else {
            return Err(reply::resource_not_found(uri));
        };
        if !template.is_instance() {
            return Ok(InstanceResource::Static);
        }
        let template = template.clone();
        let subject = self
            .instance_subject(&template, &variables, uri, context)
            .await?;
        Ok(match subject.key {
            Some(key) => InstanceResource::Instance(key),
            None => InstanceResource::Static,
        })
    }

    /// `resources/read` of the host's `turnstile://{workflow}/{token}`: where the instance is,
    /// what it may do next, and its latest transitions.
    async fn read_instance_resource(
        &self,
        catalog: &Catalog,
        workflow: &str,
        token: &str,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, ErrorData> {
        let (key, view) = self.instance_view(workflow, token, uri, context).await?;
        let next = view.next_step();
        let offer = gate::offer(catalog, workflow, &view.snapshot);
        let mut audit = self
            .shared
            .store
            .audit(&key.store_key())
            .await
            .map_err(|error| {
                reply::instance_unreadable(
                    &format!("the instance of resource {}", clip(uri)),
                    &crate::actors::InstanceError::Store(error),
                )
            })?;
        let newest = audit.len().saturating_sub(instance_resource::AUDIT_ENTRIES);
        audit.drain(..newest);
        Ok(reply::instance_document(
            uri,
            reply::InstanceDocument {
                workflow,
                token,
                state: next.state,
                done: next.done,
                tools: next.available,
                prompts: offer.prompt_names(),
                resources: offer.resource_uris(Some(token)),
                version: view.version,
                updated_at_ms: view.updated_at_ms,
                audit,
            },
        ))
    }

    pub(in crate::mcp) fn answer_unsubscribe(&self, uri: &str) {
        self.shared
            .runtime
            .unsubscribe_resource(&self.session().id, uri);
    }

    /// The instance of `workflow` a get or read names: the session's own (session mode), the
    /// one named by a handle in `_meta` (handle mode), or, when no handle names one, what a new
    /// instance would be offered (its machine's initial state).
    pub(in crate::mcp) async fn subject(
        &self,
        catalog: &Catalog,
        workflow: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Subject, ErrorData> {
        let key = match self.handle_mode(context) {
            None => Some(InstanceKey::for_session(&self.session().id, workflow)),
            Some(mode) => mode
                .handles_in(
                    &context.meta,
                    self.caller(context).tenant().as_ref(),
                    self.shared.max_handles_per_request,
                )
                .map_err(reply::invalid_handles)?
                .into_iter()
                .find(|key| *key.workflow == *workflow),
        };
        let Some(key) = key else {
            let Some(loaded) = catalog.workflow(workflow) else {
                return Err(reply::unloaded_workflow(workflow));
            };
            return Ok(Subject {
                key: None,
                snapshot: loaded.machine.initial_snapshot(),
                token: None,
            });
        };
        let view = self.view(&key, context).await?;
        Ok(Subject {
            token: Some(token_of(&key)),
            key: Some(key),
            snapshot: view.snapshot,
        })
    }

    /// The instance an instance resource's URI names: `session` is the session's own (session
    /// mode only), anything else a handle of the template's workflow, the caller's. What names
    /// no instance of the caller's is "not found", whatever the reason.
    async fn instance_subject(
        &self,
        template: &TemplateEntry,
        variables: &BTreeMap<String, String>,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Subject, ErrorData> {
        let not_found = || reply::resource_not_found(uri);
        let workflow = template.workflow().ok_or_else(not_found)?;
        let token = variables
            .get(turnstile_plugin_abi::HANDLE_VARIABLE)
            .ok_or_else(not_found)?;
        let (key, view) = self.instance_view(workflow, token, uri, context).await?;
        Ok(Subject {
            token: Some(token.clone()),
            key: Some(key),
            snapshot: view.snapshot,
        })
    }

    /// The instance of `workflow` that `token` names in an instance resource's `uri`: `session`
    /// is the session's own (session mode only), anything else a handle, the caller's. What
    /// names no instance of the caller's is "not found" (-32002), whatever the reason.
    async fn instance_view(
        &self,
        workflow: &str,
        token: &str,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(InstanceKey, crate::actors::InstanceView), ErrorData> {
        let not_found = || reply::resource_not_found(uri);
        if self.shared.catalog.current().workflow(workflow).is_none() {
            return Err(not_found());
        }
        let key = match self.handle_mode(context) {
            None if token == SESSION_TOKEN => {
                InstanceKey::for_session(&self.session().id, workflow)
            }
            Some(_) if token != SESSION_TOKEN => InstanceKey::from_handle(token)
                .map_err(|_| not_found())?
                .owned_by(self.caller(context).tenant().as_ref()),
            _ => return Err(not_found()),
        };
        if *key.workflow != *workflow {
            return Err(not_found());
        }
        let view = self
            .look_at(&key, context)
            .await
            .map_err(|error| match error {
                crate::actors::InstanceError::UnknownHandle(_) => not_found(),
                other => reply::instance_unreadable(
                    &format!("the instance of resource {}", clip(uri)),
                    &other,
                ),
            })?;
        Ok((key, view))
    }

    /// Runs the plugin's `read` for `name` of `kind` about `subject` (none: a prompt or resource
    /// bound to no workflow), within the limits of a tool bound to no workflow.
    async fn read(
        &self,
        plugin: std::sync::Arc<LoadedPlugin>,
        kind: PrimitiveKind,
        name: &str,
        request: Value,
        subject: Option<&Subject>,
    ) -> Result<crate::plugin::PluginOutput, ErrorData> {
        self.read_asking(plugin, kind, name, request, subject, Value::Null)
            .await
    }

    /// [`TurnstileServer::read`], telling the plugin what it may ask (`asking`, ABI 1.4).
    async fn read_asking(
        &self,
        plugin: std::sync::Arc<LoadedPlugin>,
        kind: PrimitiveKind,
        name: &str,
        request: Value,
        subject: Option<&Subject>,
        asking: Value,
    ) -> Result<crate::plugin::PluginOutput, ErrorData> {
        let mut context = subject
            .map(Subject::context)
            .unwrap_or_else(|| CallContext {
                call_id: uuid::Uuid::new_v4().to_string(),
                state: Value::Null,
                ..CallContext::default()
            });
        context.asking = asking;
        invoke::read(
            plugin,
            kind,
            name,
            request,
            context,
            &self.shared.call_limits,
        )
        .await
        .map_err(|error| reply::read_failure(kind, name, &error))
    }
}

/// What a resource URI names, for a subscription.
pub(in crate::mcp) enum InstanceResource {
    /// An instance resource: `resources/updated` each time this instance moves.
    Instance(InstanceKey),
    /// A resource whose content only a plugin reload changes.
    Static,
}

/// The host's instance resource template of each loaded workflow.
fn host_templates(catalog: &Catalog) -> impl Iterator<Item = rmcp::model::ResourceTemplate> + '_ {
    catalog
        .workflows()
        .map(|workflow| reply::listed_instance_template(&workflow.id))
}

/// How an instance's resources name it in their URIs.
fn token_of(key: &InstanceKey) -> String {
    match &key.owner {
        Owner::Session(_) => SESSION_TOKEN.to_owned(),
        Owner::Handle(handle) => handle.to_string(),
    }
}

/// What is wrong with `arguments` for `prompt`: a required argument missing, an argument that
/// is not a string (MCP prompt arguments are strings), or one the prompt does not declare.
fn argument_problems(
    prompt: &PromptEntry,
    arguments: &serde_json::Map<String, Value>,
) -> Vec<String> {
    let declared = &prompt.manifest.arguments;
    let mut problems: Vec<String> = declared
        .iter()
        .filter(|argument| argument.required && !arguments.contains_key(&argument.name))
        .map(|argument| format!("missing required argument {}", argument.name))
        .collect();
    for (name, value) in arguments {
        if !declared.iter().any(|argument| argument.name == *name) {
            problems.push(format!("unknown argument {}", clip(name)));
        } else if !value.is_string() {
            problems.push(format!("argument {name} must be a string"));
        }
    }
    problems
}

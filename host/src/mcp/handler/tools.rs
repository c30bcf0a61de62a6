//! The tools: `tools/list` (a session's menu, a handle client's, or the catalog's alone) and
//! `tools/call` (a tool of no workflow run alone; a workflow tool's call asked of its instance's
//! actor, which holds the gate; the answer closed with where the workflow is now).

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, InputResponses, JsonObject, Tool,
    },
    service::RequestContext,
};
use serde_json::Value;
use tracing::Instrument;

use super::{
    asking::{self, Asking, CallIdentity},
    call_events::{self, CallEvents},
    call_record::CallRecord,
    reply,
    server::TurnstileServer,
    target::{self, HandleMode, Target},
};
use crate::mcp::session::request_stream::RequestStream;
use crate::{
    actors::{Call, CallOutcome, InstanceError, InstanceKey, Owner, TaskRun},
    catalog::{Catalog, ToolEntry},
    confirm::{self, Decision},
    gate, invoke,
    logs::otlp,
    plugin::{CallContext, HostCall, PluginOutput},
};

impl TurnstileServer {
    /// 2026-07-28 by the book: every tool of the catalog, in name order, each workflow tool
    /// saying when it can be used and, in handle mode, taking the handle.
    pub(super) fn list_catalog_tools(
        &self,
        catalog: &Catalog,
        context: &RequestContext<RoleServer>,
    ) -> Vec<Tool> {
        let mode = self.handle_mode(context);
        let key = mode.map(|mode| mode.key.as_str());
        catalog
            .tools()
            .map(|tool| {
                let Some(workflow) = tool.workflow().and_then(|id| catalog.workflow(id)) else {
                    return reply::listed_tool(tool, &tool.manifest.description);
                };
                let description = gate::catalog_description(tool, workflow, key);
                let listed = reply::listed_tool(tool, &description);
                match mode {
                    Some(mode) => {
                        mode.add_handle_property(listed, gate::starts_instance(tool, workflow))
                    }
                    None => listed,
                }
            })
            .collect()
    }

    /// Session mode: one instance per workflow for this session.
    pub(super) async fn list_session_instances(
        &self,
        context: &RequestContext<RoleServer>,
        tools: &mut Vec<Tool>,
    ) -> Result<(), ErrorData> {
        let catalog = &*self.shared.catalog.current();
        for workflow in catalog.workflows() {
            let key = InstanceKey::for_session(&self.session().id, &workflow.id);
            let view = self.view(&key, context).await?;
            for tool in gate::menu(&view.workflow, &view.snapshot) {
                tools.push(Self::listed(None, &tool, &view.workflow, &view.snapshot));
            }
        }
        Ok(())
    }

    /// Handle mode: the named instance's menu; without a name, the menus of every instance this
    /// session touched plus the tools that start a new instance.
    pub(super) async fn list_handle_instances(
        &self,
        mode: &HandleMode,
        context: &RequestContext<RoleServer>,
        tools: &mut Vec<Tool>,
    ) -> Result<(), ErrorData> {
        let catalog = &*self.shared.catalog.current();
        let (views, listing_named) = self.listed_instances(mode, catalog, context).await?;
        let mut seen = std::collections::HashSet::new();
        for (_, view) in views {
            for tool in gate::menu(&view.workflow, &view.snapshot) {
                if seen.insert(tool.name().to_string()) {
                    tools.push(Self::listed(
                        Some(mode),
                        &tool,
                        &view.workflow,
                        &view.snapshot,
                    ));
                }
            }
        }
        if !listing_named {
            // The tools that start an instance, and with them the workflow's tools bound to no
            // state (always visible; their schema says they need a handle).
            for workflow in catalog.workflows() {
                let initial = workflow.machine.initial_snapshot();
                for tool in gate::menu(workflow, &initial) {
                    let starts_or_ungated =
                        gate::starts_instance(&tool, workflow) || !tool.is_gated();
                    if starts_or_ungated && seen.insert(tool.name().to_string()) {
                        tools.push(Self::listed(Some(mode), &tool, workflow, &initial));
                    }
                }
            }
        }
        Ok(())
    }

    /// A call of a tool bound to no workflow: its binding's confirmation first, if it has one
    /// (`confirm.rs`, asked as a handler's question is), then the plugin alone, once per round
    /// of asking (`asking.rs`). Its one JSON-RPC error: a 2026-07-28 request that did not
    /// declare a capability the tool's questions need.
    pub(super) async fn call_unbound(
        &self,
        tool: Arc<ToolEntry>,
        arguments: Value,
        mut asking: Option<Asking>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = tool.name().to_string();
        let deadline = std::time::Instant::now() + self.shared.call_limits.timeout;
        let again = asking.is_some();
        let mut arguments = Some(arguments);
        loop {
            let view = asking.as_ref().map_or(Value::Null, Asking::plugin_view);
            let decision = unbound_confirmation(
                &tool,
                arguments
                    .as_ref()
                    .expect("kept while the call may run again"),
                &view,
            );
            let confirmation = match decision {
                Decision::NotNeeded => None,
                Decision::Accepted(content) => Some(content),
                Decision::Declined(action) => return Ok(reply::declined(&name, &action).into()),
                // Asked before the handler runs, as a handler's own question is asked.
                Decision::Ask(requests) => {
                    let Some(asking) = asking.as_mut() else {
                        // A tool that confirms asks (`ToolEntry::asks`): unreachable.
                        let needed = reply::needed(&requests);
                        return Ok(reply::input_unavailable(&name, &needed).into());
                    };
                    let next = asking
                        .next(requests, context, &self.shared.state_seal, deadline)
                        .await;
                    match asked(&name, next) {
                        Some(answer) => return answer.into(),
                        None => continue,
                    }
                }
            };
            let call_context = CallContext {
                call_id: uuid::Uuid::new_v4().to_string(),
                handle: String::new(),
                state: Value::Null,
                asking: confirm::told(view, confirmation.as_ref()),
                ..CallContext::default()
            };
            let (host, events) = HostCall::new(context.ct.child_token());
            let running = std::pin::pin!(invoke::run(
                tool.clone(),
                for_this_run(&mut arguments, again),
                call_context,
                Some(host),
                &self.shared.call_limits,
                None,
            ));
            let output = match self
                .call_events(context)
                .forward_during(running, events)
                .await
            {
                Ok(output) => output,
                Err(error) => return Ok(reply::invoke_failure(&name, &error).into()),
            };
            let (Some(asking), PluginOutput::NeedsInput(requests)) = (asking.as_mut(), &output)
            else {
                return Ok(reply::ran(&name, output, None).into());
            };
            let next = asking
                .next(requests.clone(), context, &self.shared.state_seal, deadline)
                .await;
            if let Some(answer) = asked(&name, next) {
                return answer.into();
            }
        }
    }

    /// Whether a call of the tool `name` may ask the client for input (`asking.rs`).
    pub(in crate::mcp) fn may_ask(&self, name: &str) -> bool {
        self.shared
            .catalog
            .current()
            .tool(name)
            .is_some_and(|tool| tool.asks())
    }

    /// Whether a `prompts/get` of the prompt `name` may ask the client for input.
    pub(in crate::mcp) fn prompt_may_ask(&self, name: &str) -> bool {
        self.shared
            .catalog
            .current()
            .prompt(name)
            .is_some_and(|prompt| prompt.manifest.asks)
    }

    /// Where the plugin's logs and progress go during a call made by this request.
    pub(super) fn call_events<'a>(
        &'a self,
        context: &'a RequestContext<RoleServer>,
    ) -> CallEvents<'a> {
        // A request without a session gets logs only if it names a level in `_meta` (2026-07-28
        // has no `logging/setLevel`); a session has a level, the default until it sets one.
        let min_level = if self.caller(context).is_sessionless() {
            context.meta.log_level().map(call_events::from_rmcp)
        } else {
            Some(self.session().log_level())
        };
        let sessionless = self.caller(context).is_sessionless();
        let own_stream = context.extensions.get::<RequestStream>();
        CallEvents {
            peer: &context.peer,
            own_stream,
            outbox: (!sessionless).then(|| self.session().outbox()),
            progress_token: context.meta.get_progress_token(),
            min_level,
            // A session's request whose stream Turnstile writes (`direct.rs`), or a request
            // without a session, whose own stream is the only one it has. A session's request
            // that rmcp serves hears of its move from the notifier, with the other watchers.
            tells_own_move: self.lists_follow_instances(context)
                && (sessionless || own_stream.is_some()),
        }
    }

    /// `tools/call`: DESIGN behaviours 2 to 6, in the order a call meets them.
    ///
    /// The call's span (`record`) is made once the instance is known, with all its fields at
    /// once; what comes before it decides nothing that logs.
    #[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
    pub(super) fn answer_call<'a>(
        &'a self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        catalog: &'a Catalog,
        record: &'a CallRecord,
        task: Option<Arc<crate::tasks::Task>>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + 'a {
        async move {
            // A shutdown waits for this call to deliver its result.
            let _in_flight = self.shared.shutdown.call_started();
            let Some(tool) = record.tool().cloned() else {
                return Err(reply::unknown_tool(&request.name));
            };
            let mut arguments: JsonObject = request.arguments.unwrap_or_default();
            let asking = self.asking_of(
                &tool,
                &arguments,
                request.input_responses,
                request.request_state.as_deref(),
                &context,
            )?;
            let Some(workflow) = tool.workflow().and_then(|id| catalog.workflow(id)).cloned()
            else {
                if let Err(problems) = tool.check_arguments(&Value::Object(arguments.clone())) {
                    return Ok(reply::invalid_arguments(tool.name(), &problems).into());
                }
                // Boxed: a call of a workflow's tool, the common one, does not carry room for it.
                let arguments = Value::Object(arguments);
                let running = Box::pin(self.call_unbound(tool, arguments, asking, &context));
                let span = record.span(None, self.exported_traceparent(&context));
                return running.instrument(span).await;
            };
            // The handle is the host's argument, not the plugin's: take it out before the schema
            // check.
            let target = match target::resolve(
                self.handle_mode(&context),
                &self.session().id,
                self.caller(&context).tenant().as_ref(),
                &tool,
                &workflow,
                &mut arguments,
                &context.meta,
            ) {
                Ok(target) => target,
                Err(no_target) => return Ok(reply::no_target(tool.name(), &no_target).into()),
            };
            // Checked by the instance, against its own version of the tool.
            let arguments = Value::Object(arguments);
            let idempotency_key = match context.meta.get("idempotencyKey") {
                None => None,
                Some(Value::String(key))
                    if !key.is_empty()
                        && key.chars().count() <= reply::MAX_IDEMPOTENCY_KEY_CHARS =>
                {
                    Some(key.clone())
                }
                Some(bad) => return Err(reply::invalid_idempotency_key(bad)),
            };
            // A minted instance is created by the call itself (one message, one save), and only
            // if the call succeeds.
            let (key, mint) = match target {
                Target::Existing(key) => (key, false),
                Target::Mint(key) => (key, true),
            };
            // A handle-keyed mint counts against its caller's rate (a session's instances are
            // bounded by its sessions).
            if mint
                && matches!(key.owner, Owner::Handle(_))
                && let Some(holder) = self.caller(&context).quota_holder()
                && let Err(refusal) = self.shared.quotas.take_mint(&holder)
            {
                let refused = reply::over_quota(tool.name(), &refusal);
                let standing = Err(self.not_started(&key.workflow));
                return Ok(self
                    .closed_with_step(refused, &key, &context, standing)
                    .into());
            }
            // A mint in flight holds a place under the instance limit until it settles.
            let mut _minting = None;
            if mint
                && let Some(tenant) = &key.tenant
                && let Some(holder) = self.caller(&context).quota_holder()
            {
                let store = &self.shared.store;
                let quotas = &self.shared.quotas;
                let refused = match quotas.reserve_instance(store, tenant, &holder).await {
                    Ok(Ok(place)) => {
                        _minting = place;
                        None
                    }
                    Ok(Err(refusal)) => Some(reply::over_quota(tool.name(), &refusal)),
                    Err(down) => Some(reply::failure(tool.name(), &InstanceError::Store(down))),
                };
                if let Some(refused) = refused {
                    let standing = Err(self.not_started(&key.workflow));
                    return Ok(self
                        .closed_with_step(refused, &key, &context, standing)
                        .into());
                }
            }
            let span = record.span(Some(&key), self.exported_traceparent(&context));
            self.call_instance(
                tool,
                key,
                mint,
                arguments,
                idempotency_key,
                asking,
                context,
                task,
            )
            .instrument(span)
            .await
        }
    }

    /// What a call of `tool` with `arguments` knows of its asking (`asking.rs`): only a tool
    /// whose handler may ask is told what it may ask (`None` for one that asks nothing); its
    /// retries' answers and sealed state are checked here, before anything runs.
    fn asking_of(
        &self,
        tool: &ToolEntry,
        arguments: &JsonObject,
        input_responses: Option<InputResponses>,
        request_state: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<Asking>, ErrorData> {
        if !tool.asks() {
            if request_state.is_some() {
                // No state was ever made for it: it asks nothing.
                let why = asking::Unusable::State(asking::NOTHING_ASKED);
                return Err(reply::unusable_answers(&why));
            }
            return Ok(None);
        }
        let handle_in_meta = self
            .handle_mode(context)
            .and_then(|mode| context.meta.get(&mode.key));
        let identity = CallIdentity::new(
            "tools/call",
            tool.name(),
            arguments,
            handle_in_meta,
            self.caller(context)
                .principal
                .as_ref()
                .map(|principal| principal.0.as_str()),
        );
        let asking = Asking::start(
            context,
            &self.shared.state_seal,
            identity,
            input_responses,
            request_state,
            self.shared.confirm_fallback,
        )
        .map_err(|why| reply::unusable_answers(&why))?;
        if tool.workflow().is_some() && asking.unpinned_state() {
            let why = asking::Unusable::State(asking::NO_STEP);
            return Err(reply::unusable_answers(&why));
        }
        Ok(Some(asking))
    }

    /// Whether `request`, a call of `tool` (bound to no workflow), is answered by its binding's
    /// confirmation (`confirm.rs`) alone: still to be asked of a client that can answer it, or
    /// declined. A call that would run as a task is then answered plainly (SEP-2663: a call's
    /// rounds of input SHOULD be done with before its task is created), and its retry with an
    /// accepted answer becomes the task. Answers or a state the plain call would refuse count
    /// too: the plain call refuses them. A workflow's tool confirms in its instance's actor,
    /// after the gate.
    pub(super) fn confirmation_answers(
        &self,
        tool: &ToolEntry,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> bool {
        if tool.confirm.is_none() || tool.workflow().is_some() {
            return false;
        }
        let arguments = request.arguments.clone().unwrap_or_default();
        let asking = self.asking_of(
            tool,
            &arguments,
            request.input_responses.clone(),
            request.request_state.as_deref(),
            context,
        );
        let Ok(Some(asking)) = asking else {
            return true;
        };
        let decision = unbound_confirmation(tool, &Value::Object(arguments), &asking.plugin_view());
        match decision {
            Decision::Ask(requests) => asking.can_answer(&requests),
            Decision::Declined(_) => true,
            Decision::NotNeeded | Decision::Accepted(_) => false,
        }
    }

    /// The `traceparent` the call's span continues, looked for only when spans are exported.
    fn exported_traceparent<'c>(&self, context: &'c RequestContext<RoleServer>) -> Option<&'c str> {
        if otlp::exporting() {
            self.traceparent(context)
        } else {
            None
        }
    }

    /// [`TurnstileServer::answer_call`] once it knows the instance `key` the call is for, and
    /// whether the call mints it.
    #[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
    #[allow(clippy::too_many_arguments)] // One call's whole request, each part named.
    pub(super) fn call_instance(
        &self,
        tool: Arc<ToolEntry>,
        key: InstanceKey,
        mint: bool,
        arguments: Value,
        idempotency_key: Option<String>,
        mut asking: Option<Asking>,
        context: RequestContext<RoleServer>,
        task: Option<Arc<crate::tasks::Task>>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + '_ {
        async move {
            let name = tool.name().to_string();
            // A call to run as a task: the instance answers once it started, and the outcome
            // comes later, on `task_done` (`tasks.rs`).
            let (mut task_run, task_done) = match &task {
                Some(task) => {
                    let (done, task_done) = tokio::sync::oneshot::channel();
                    let run = TaskRun {
                        id: task.id.clone(),
                        ttl_ms: task.ttl.as_millis() as u64,
                        done,
                    };
                    (Some(run), Some(task_done))
                }
                None => (None, None),
            };
            let watcher = self.watcher(&key, &context);
            let ahead = self.call_events(&context);
            // A session told of its own move in the reply is not told again by the notifier.
            let told_in_reply = (ahead.tells_own_move && !self.caller(&context).is_sessionless())
                .then(|| self.session().id.clone());
            // Each run is a whole call: the gate is asked again, and a handler that needs input
            // ends having fired nothing (`asking.rs`).
            let deadline = std::time::Instant::now() + self.shared.call_limits.timeout;
            let again = asking.is_some();
            let (mut arguments, mut idempotency_key) = (Some(arguments), Some(idempotency_key));
            let answer = loop {
                let call_id = uuid::Uuid::new_v4().to_string();
                let (host, events) = HostCall::new(context.ct.child_token());
                let call = Call {
                    tool: name.clone(),
                    arguments: for_this_run(&mut arguments, again),
                    call_id,
                    host: Some(host),
                    mint,
                    idempotency_key: for_this_run(&mut idempotency_key, again),
                    principal: self.caller(&context).principal_name(),
                    sent_at: std::time::Instant::now(),
                    told_in_reply: told_in_reply.clone(),
                    asking: asking.as_ref().map_or(Value::Null, Asking::plugin_view),
                    made_for: asking.as_ref().and_then(Asking::made_for),
                    watcher: watcher.clone(),
                    // The call's span, current here, for the actor to run the call in when
                    // spans are exported (its children, the state it moves from and to).
                    span: if otlp::exporting() {
                        tracing::Span::current()
                    } else {
                        tracing::Span::none()
                    },
                    task: task_run.take(),
                };
                let running = std::pin::pin!(self.shared.runtime.call(key.clone(), call));
                let answer = ahead.forward_during(running, events).await;
                let (
                    Some(asking),
                    Ok(CallOutcome::Ran {
                        output: PluginOutput::NeedsInput(requests),
                        revision,
                        next: asked_at,
                        ..
                    }),
                ) = (asking.as_mut(), &answer)
                else {
                    break answer;
                };
                let asked_at = asked_at.clone();
                // The answers to come are for the instance as it stands now.
                asking.asked_at(*revision);
                let requests = requests.clone();
                let next = asking
                    .next(requests, &context, &self.shared.state_seal, deadline)
                    .await;
                if matches!(next, asking::Next::Rerouted)
                    && mint
                    && let Some(holder) = self.caller(&context).quota_holder()
                {
                    // rmcp serves the call from the start, and takes its own mint then.
                    self.shared.quotas.give_back_mint(&holder);
                }
                let Some(asked) = asked(&name, next) else {
                    continue;
                };
                if mint {
                    // Nothing was created: no handle goes out, no actor stays.
                    self.shared.runtime.forget(key.clone());
                }
                return match asked {
                    // An error closes with the next step, as every workflow tool's result does.
                    Asked::Error(result) => {
                        let standing = if mint {
                            Err(self.not_started(&key.workflow))
                        } else {
                            Ok((asked_at, false))
                        };
                        Ok(self
                            .closed_with_step(result, &key, &context, standing)
                            .into())
                    }
                    Asked::Other(response) => Ok(response),
                    Asked::Refused(error) => Err(error),
                };
            };
            if let (Some(task), Some(task_done)) = (task, task_done)
                && matches!(answer, Ok(CallOutcome::TaskStarted { .. }))
            {
                self.settle(&key, &answer);
                return Ok(self.answer_when_done(task, task_done, name, key, context));
            }
            self.answer_of(&name, &key, mint, answer, asking.as_ref(), &ahead, &context)
                .await
        }
    }

    /// The task's call started: its outcome, when the instance hands it over, ends the task
    /// with the answer a plain call would have given.
    fn answer_when_done(
        &self,
        task: Arc<crate::tasks::Task>,
        task_done: tokio::sync::oneshot::Receiver<Result<CallOutcome, InstanceError>>,
        name: String,
        key: InstanceKey,
        context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let created = super::tasks::created(&task);
        self.hear_cancels_from_elsewhere(task.clone());
        let server = self.clone();
        tokio::spawn(async move {
            let answer = task_done.await.unwrap_or(Err(InstanceError::Stopped));
            let ahead = server.call_events(&context);
            let response = server
                .answer_of(&name, &key, false, answer, None, &ahead, &context)
                .await;
            super::tasks::end(&task, &name, response);
        });
        created
    }

    /// The answer to a call on an instance, from the instance's `answer`, with its next step.
    #[allow(clippy::too_many_arguments)] // One call's pieces, each used once.
    async fn answer_of(
        &self,
        name: &str,
        key: &InstanceKey,
        mint: bool,
        answer: Result<CallOutcome, InstanceError>,
        asking: Option<&Asking>,
        ahead: &CallEvents<'_>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let created = CallOutcome::leaves_instance(mint, answer.as_ref().ok());
        if created {
            self.settle(key, &answer);
        } else {
            // The instance was never created: no handle goes out, no actor stays.
            self.shared.runtime.forget(key.clone());
            if matches!(answer, Ok(CallOutcome::InvalidArguments { .. }))
                && matches!(key.owner, Owner::Handle(_))
                && let Some(holder) = self.caller(context).quota_holder()
            {
                // Refused before anything ran, as a call with no instance to mint would be.
                self.shared.quotas.give_back_mint(&holder);
            }
        }
        if matches!(answer, Ok(CallOutcome::MovedOn { .. }))
            && asking.is_some_and(Asking::answers_sealed)
        {
            // The sealed state the client sent answered a step that is gone.
            let why = asking::Unusable::State(asking::MOVED_ON);
            return Err(reply::unusable_answers(&why));
        }
        // Where the instance stands, for the result's next step: known (`Ok`), or not for
        // sure (`Err`).
        let (result, standing) = match answer {
            Ok(CallOutcome::InvalidArguments { problems, next }) => {
                (reply::invalid_arguments(name, &problems), Ok((next, false)))
            }
            Ok(CallOutcome::Forbidden(refusal)) => (
                reply::forbidden(&refusal),
                Ok((gate::NextStep::of_refusal(&refusal), false)),
            ),
            Ok(CallOutcome::Looped {
                output,
                state,
                next,
            }) => (
                reply::transition_loop(name, output, state),
                Ok((next, false)),
            ),
            Ok(CallOutcome::Ran {
                output,
                moved,
                state,
                next,
                lists,
                ..
            }) => {
                if let Some(lists) = lists {
                    ahead.tell_of_move(lists).await;
                }
                (reply::ran(name, output, Some(state)), Ok((next, moved)))
            }
            // Answered by `call_instance` before it comes here, with the task.
            Ok(CallOutcome::TaskStarted { id, next }) => (
                reply::asking_failed(
                    name,
                    &format!("the call runs on as task {id}; follow it with tasks/get"),
                ),
                Ok((next, false)),
            ),
            Ok(CallOutcome::Declined { action, next }) => {
                (reply::declined(name, &action), Ok((next, false)))
            }
            // Asked within this request (2025 revisions), and moved on meanwhile.
            Ok(CallOutcome::MovedOn { next }) => (
                reply::asking_failed(
                    name,
                    "the instance moved on to another step while the input was asked for; \
                     call the tool again to be asked anew",
                ),
                Ok((next, false)),
            ),
            Ok(CallOutcome::Failed {
                error,
                after_handler,
                next,
                readers,
            }) => {
                let result = reply::call_failed(name, &error, after_handler, &readers);
                let standing = if reply::may_have_saved(&error) {
                    Err(reply::Uncertain::MayHaveMoved {
                        before: next,
                        readers,
                    })
                } else {
                    Ok((next, false))
                };
                (result, standing)
            }
            Err(error) => (reply::failure(name, &error), Err(reply::Uncertain::Unread)),
        };
        // A failed mint left no instance to have a next step: the tools that start one.
        // (One whose save may have been applied may have left one: its handle goes out.)
        let may_exist = matches!(standing, Err(reply::Uncertain::MayHaveMoved { .. }));
        let standing = if created || (may_exist && mint) {
            standing
        } else {
            Err(self.not_started(&key.workflow))
        };
        Ok(self.closed_with_step(result, key, context, standing).into())
    }

    /// What a call of `workflow` that started nothing says of its next step: the tools that
    /// start an instance.
    fn not_started(&self, workflow: &str) -> reply::Uncertain {
        let catalog = self.shared.catalog.current();
        let starters = catalog
            .workflow(workflow)
            .map(|workflow| gate::starters(workflow));
        reply::Uncertain::NotStarted {
            starters: starters.unwrap_or_default(),
        }
    }

    /// `result` closed as every result of a workflow tool is: with the instance's handle (in
    /// handle mode, when one exists) and its next step, known (`Ok`: where it is, and whether
    /// the call moved it) or not for sure (`Err`).
    pub(super) fn closed_with_step(
        &self,
        result: CallToolResult,
        key: &InstanceKey,
        context: &RequestContext<RoleServer>,
        standing: Result<(gate::NextStep, bool), reply::Uncertain>,
    ) -> CallToolResult {
        let next_step = self.shared.next_step;
        let exists = !matches!(standing, Err(reply::Uncertain::NotStarted { .. }));
        let handle = match (self.handle_mode(context), &key.owner) {
            (Some(mode), Owner::Handle(handle)) if exists => Some((mode, &**handle)),
            _ => None,
        };
        let result = match handle {
            Some((mode, handle)) => {
                reply::with_handle(result, &mode.key, handle, !next_step.writes_text())
            }
            None => result,
        };
        let handle = handle.map(|(_, handle)| handle);
        match standing {
            Ok((next, moved)) => reply::with_next_step(
                result,
                next_step,
                reply::Whereabouts {
                    workflow: &key.workflow,
                    handle,
                    next,
                    moved,
                },
            ),
            Err(uncertain) => {
                reply::with_uncertain_step(result, next_step, &key.workflow, handle, uncertain)
            }
        }
    }
}

/// What the binding's confirmation (`confirm.rs`) of a tool bound to no workflow comes to for
/// a call with `arguments`, told `asking` so far: its `when` sees an empty context, as there is
/// no instance.
fn unbound_confirmation(tool: &ToolEntry, arguments: &Value, asking: &Value) -> Decision {
    tool.confirm
        .as_ref()
        .map_or(Decision::NotNeeded, |confirm| {
            confirm.decide(&Value::Object(JsonObject::new()), arguments, asking)
        })
}

/// What one run of a call gets of `kept`: a copy when the call may run `again` (its handler may
/// ask), else `kept` itself, taken (a call that cannot ask runs once, and copies nothing).
fn for_this_run<T: Clone>(kept: &mut Option<T>, again: bool) -> T {
    let taken = if again { kept.clone() } else { kept.take() };
    taken.expect("a call that cannot ask runs once")
}

/// What a call whose handler asked for input answers: an error result (a workflow tool's closes
/// with its next step), another response, or a JSON-RPC error (the request is refused).
enum Asked {
    Error(CallToolResult),
    Other(CallToolResponse),
    Refused(ErrorData),
}

impl From<Asked> for Result<CallToolResponse, ErrorData> {
    fn from(asked: Asked) -> Self {
        match asked {
            Asked::Error(result) => Ok(result.into()),
            Asked::Other(response) => Ok(response),
            Asked::Refused(error) => Err(error),
        }
    }
}

/// What a call of `tool` whose handler asked for input answers, given what came of asking;
/// `None` when the answers are in and the handler runs again.
fn asked(tool: &str, next: asking::Next) -> Option<Asked> {
    Some(match next {
        asking::Next::RunAgain => return None,
        asking::Next::InputRequired(result) => Asked::Other(result.into()),
        asking::Next::Unavailable(requests) => {
            Asked::Error(reply::input_unavailable(tool, &reply::needed(&requests)))
        }
        asking::Next::Undeclared(requests) => Asked::Refused(reply::missing_client_capability(
            tool,
            &reply::needed(&requests),
            asking::required_capabilities(&requests),
        )),
        asking::Next::Failed(why) => Asked::Error(reply::asking_failed(tool, &why)),
        asking::Next::Cancelled => {
            Asked::Error(reply::asking_failed(tool, "the call was cancelled"))
        }
        asking::Next::Rerouted => Asked::Other(CallToolResult::success(Vec::new()).into()),
    })
}

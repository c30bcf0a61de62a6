//! [`TurnstileServer`]: rmcp's `ServerHandler` for one session.
//!
//! `tools/list` asks each workflow instance of the caller for its state and the gate for its
//! menu; `tools/call` resolves the tool, checks its arguments, and hands the call to the
//! instance's actor. Every request that touches an instance subscribes the session to it.
//!
//! It must not decide visibility (gate) or hold state (actors); its replies come from `reply`.

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
};
use serde_json::Value;

use super::{reply, session::SessionScope};
use crate::{
    actors::{CallOutcome, InstanceKey, Runtime},
    catalog::{Catalog, ToolEntry},
    gate,
    plugin::{CallContext, PluginOutput},
};

/// What every session shares.
pub struct Shared {
    pub catalog: Arc<Catalog>,
    pub runtime: Runtime,
}

/// One per MCP session (stdio: one per connection). rmcp drops it when the session ends.
#[derive(Clone)]
pub struct TurnstileServer {
    shared: Arc<Shared>,
    session: Arc<SessionScope>,
}

impl TurnstileServer {
    /// Cheap: the Streamable HTTP service calls it once per session.
    pub fn new(shared: Arc<Shared>) -> Self {
        let session = Arc::new(SessionScope::new(shared.runtime.clone()));
        TurnstileServer { shared, session }
    }

    /// The instance of `workflow` this request is about, subscribing the session to it.
    fn instance_for(&self, workflow: &str, context: &RequestContext<RoleServer>) -> InstanceKey {
        let key = InstanceKey::for_session(&self.session.id, workflow);
        self.shared.runtime.subscribe(
            &self.session.id,
            self.session.listener(&context.peer),
            key.clone(),
        );
        key
    }

    async fn call_unbound(&self, tool: Arc<ToolEntry>, arguments: Value) -> CallToolResponse {
        let context = CallContext {
            call_id: uuid::Uuid::new_v4().to_string(),
            handle: String::new(),
            state: Value::Null,
        };
        let name = tool.name().to_string();
        let ran = tokio::task::spawn_blocking(move || {
            tool.plugin.call(tool.name(), &arguments, &context)
        })
        .await;
        match ran {
            Ok(Ok(PluginOutput::Success(output))) => reply::success(output),
            Ok(Ok(PluginOutput::ToolError(message))) => reply::tool_error(&name, &message),
            Ok(Err(error)) => reply::plugin_failure(&name, &error),
            Err(join) => reply::failure(
                &name,
                &crate::actors::InstanceError::Worker(join.to_string()),
            ),
        }
        .into()
    }
}

impl ServerHandler for TurnstileServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("turnstile", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Tools appear and disappear as each workflow moves on: only the steps that make \
                 sense now are listed. Re-read tools/list after notifications/tools/list_changed.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let catalog = &self.shared.catalog;
        let mut tools = Vec::new();
        for tool in catalog.tools().filter(|tool| tool.workflow().is_none()) {
            tools.push(reply::listed_tool(tool, &tool.manifest.description));
        }
        for workflow in catalog.workflows() {
            let key = self.instance_for(&workflow.id, &context);
            let view = self.shared.runtime.view(key).await.map_err(|error| {
                ErrorData::internal_error(
                    format!("cannot read the state of workflow {}: {error}", workflow.id),
                    None,
                )
            })?;
            for tool in gate::menu(catalog, workflow, &view.snapshot) {
                tools.push(reply::listed_tool(
                    &tool,
                    gate::description(&tool, workflow, &view.snapshot),
                ));
            }
        }
        // The menu depends on the caller's state, so a client must not serve it from a cache.
        Ok(ListToolsResult::with_all_items(tools).with_ttl_ms(0))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = self.shared.catalog.tool(&request.name).cloned() else {
            return Err(reply::unknown_tool(&request.name));
        };
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        if let Err(problems) = tool.check_arguments(&arguments) {
            return Ok(reply::invalid_arguments(tool.name(), &problems).into());
        }
        let Some(workflow) = tool.workflow().map(str::to_string) else {
            return Ok(self.call_unbound(tool, arguments).await);
        };
        let key = self.instance_for(&workflow, &context);
        let call_id = uuid::Uuid::new_v4().to_string();
        let name = tool.name().to_string();
        let result = match self
            .shared
            .runtime
            .call(key, tool, arguments, call_id)
            .await
        {
            Ok(CallOutcome::Forbidden(refusal)) => reply::forbidden(&refusal),
            Ok(CallOutcome::Ran { output, .. }) => match output {
                PluginOutput::Success(output) => reply::success(output),
                PluginOutput::ToolError(message) => reply::tool_error(&name, &message),
            },
            Err(error) => reply::failure(&name, &error),
        };
        Ok(result.into())
    }
}

//! The two requests a load client makes, `tools/list` and `tools/call`, and what their answers
//! mean: a menu of tools, and a call's outcome sorted the way the gating contract reads it.
//!
//! A refusal is an `isError` result whose `structuredContent.error.code` is `FORBIDDEN`
//! (DESIGN.md, behaviour 2); this is the one place that reads it so.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::{client::Session, wire::ClientError};

/// The code of a refusal by gating.
pub const FORBIDDEN: &str = "FORBIDDEN";

/// What the tester needs of a listed tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    pub description: Option<String>,
    pub input_schema: Value,
    /// `annotations.readOnlyHint`: such a tool cannot move a workflow on, so an agent that wants
    /// to get somewhere prefers the others.
    pub read_only: bool,
}

impl ToolInfo {
    fn from_json(tool: &Value) -> Option<ToolInfo> {
        Some(ToolInfo {
            name: tool.get("name")?.as_str()?.to_string(),
            description: tool
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_string),
            input_schema: tool
                .get("inputSchema")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"})),
            read_only: tool
                .pointer("/annotations/readOnlyHint")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }
}

/// A menu: the tools a `tools/list` returned, sorted by name.
pub type Menu = Vec<ToolInfo>;

/// Whether two menus differ as a client sees them (names or descriptions): the contract's
/// definition of a transition is a successful call after which they do.
pub fn menus_differ(before: &Menu, after: &Menu) -> bool {
    before.len() != after.len()
        || before
            .iter()
            .zip(after)
            .any(|(a, b)| a.name != b.name || a.description != b.description)
}

/// How a `tools/call` ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A result without `isError`; its `structuredContent`, if any.
    Ok { structured: Option<Value> },
    /// `isError` with the `FORBIDDEN` code: refused by gating.
    Refused,
    /// `isError` with another code (or none).
    ToolError { code: Option<String> },
    /// A JSON-RPC error instead of a result.
    RpcError { code: i64, message: String },
}

impl Outcome {
    /// Reads a JSON-RPC response to `tools/call`.
    pub fn from_response(response: &Value) -> Result<Outcome, ClientError> {
        if let Some(error) = response.get("error") {
            return Ok(Outcome::RpcError {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            });
        }
        let result = response.get("result").ok_or_else(|| {
            ClientError::BadAnswer("a response with neither result nor error".into())
        })?;
        let structured = result.get("structuredContent");
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            let code = structured
                .and_then(|s| s.pointer("/error/code"))
                .and_then(Value::as_str);
            return Ok(match code {
                Some(FORBIDDEN) => Outcome::Refused,
                code => Outcome::ToolError {
                    code: code.map(str::to_string),
                },
            });
        }
        Ok(Outcome::Ok {
            structured: structured.cloned(),
        })
    }

    /// A short, stable name, for counting outcomes by kind (borrowed in the common cases: this
    /// runs for every call).
    pub fn kind(&self) -> Cow<'static, str> {
        match self {
            Outcome::Ok { .. } => "ok".into(),
            Outcome::Refused => "refused (FORBIDDEN)".into(),
            Outcome::ToolError { code: Some(code) } => format!("tool error {code}").into(),
            Outcome::ToolError { code: None } => "tool error (no code)".into(),
            Outcome::RpcError { code, .. } => format!("JSON-RPC error {code}").into(),
        }
    }
}

/// `tools/list`, following `nextCursor`; `_meta` names a handle in handle mode.
pub async fn list(session: &mut Session, meta: Option<&Value>) -> Result<Menu, ListError> {
    let mut menu = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut params = json!({});
        if let Some(meta) = meta {
            params["_meta"] = meta.clone();
        }
        if let Some(cursor) = &cursor {
            params["cursor"] = cursor.clone().into();
        }
        let response = session.request("tools/list", params).await?;
        if let Some(error) = response.get("error") {
            return Err(ListError::Refused(error.to_string()));
        }
        let result = response.get("result").unwrap_or(&Value::Null);
        let tools = result.get("tools").and_then(Value::as_array);
        menu.extend(tools.into_iter().flatten().filter_map(ToolInfo::from_json));
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() => cursor = Some(next.to_string()),
            _ => break,
        }
    }
    menu.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(menu)
}

/// Why a `tools/list` gave no menu.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("tools/list answered a JSON-RPC error: {0}")]
    Refused(String),
}

impl ListError {
    pub fn kind(&self) -> String {
        match self {
            ListError::Client(error) => error.kind(),
            ListError::Refused(_) => "tools/list error".into(),
        }
    }
}

/// `tools/call`.
pub async fn call(
    session: &mut Session,
    name: &str,
    arguments: Value,
) -> Result<Outcome, ClientError> {
    let params = json!({"name": name, "arguments": arguments});
    let response = session.request("tools/call", params).await?;
    Outcome::from_response(&response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_read_as_the_contract_defines_them() {
        let refused = json!({"result": {"isError": true, "content": [],
            "structuredContent": {"error": {"code": "FORBIDDEN", "allowed": []}}}});
        assert_eq!(Outcome::from_response(&refused).unwrap(), Outcome::Refused);
        let busy = json!({"result": {"isError": true,
            "structuredContent": {"error": {"code": "BUSY"}}}});
        assert_eq!(
            Outcome::from_response(&busy).unwrap(),
            Outcome::ToolError {
                code: Some("BUSY".into())
            }
        );
        // An error result without the code is not a refusal, whatever its text says.
        let plain = json!({"result": {"isError": true, "content": [{"type": "text",
            "text": "FORBIDDEN"}]}});
        assert_eq!(
            Outcome::from_response(&plain).unwrap(),
            Outcome::ToolError { code: None }
        );
        let ok = json!({"result": {"content": [], "structuredContent": {"handle": "h"}}});
        assert_eq!(
            Outcome::from_response(&ok).unwrap(),
            Outcome::Ok {
                structured: Some(json!({"handle": "h"}))
            }
        );
        let rpc = json!({"error": {"code": -32602, "message": "unknown tool"}});
        assert!(matches!(
            Outcome::from_response(&rpc).unwrap(),
            Outcome::RpcError { code: -32602, .. }
        ));
        assert!(Outcome::from_response(&json!({"id": 1})).is_err());
    }

    #[test]
    fn menus_differ_by_name_or_description() {
        let tool = |name: &str, description: &str| ToolInfo {
            name: name.into(),
            description: Some(description.into()),
            input_schema: json!({}),
            read_only: false,
        };
        let menu = vec![tool("a", "x"), tool("b", "y")];
        assert!(!menus_differ(&menu, &menu.clone()));
        assert!(menus_differ(&menu, &vec![tool("a", "x")]));
        assert!(menus_differ(&menu, &vec![tool("a", "x"), tool("c", "y")]));
        assert!(menus_differ(&menu, &vec![tool("a", "x"), tool("b", "z")]));
    }
}

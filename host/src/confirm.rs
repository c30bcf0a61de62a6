//! Human confirmation as part of a tool's binding (issue 40): the plugin-free way to put a
//! person in front of a destructive step (`invoice.discharge`, `payment.capture`).
//!
//! A tool whose manifest declares `confirm` (`turnstile_plugin_abi::ConfirmManifest`) is
//! confirmed before its handler runs, once the gate has let the call through: the host asks
//! with a form under [`CONFIRM_KEY`], by the same means a handler asks (`mcp/handler/asking.rs`: an
//! elicitation on the 2025 revisions, an input-required result on 2026-07-28), and the call runs
//! again with the answer. An accept runs the handler, and the form's content becomes the event's
//! `input.confirmation` and the audit entry's `confirmation`; a decline or cancel runs nothing
//! and fires nothing (`DECLINED`).
//!
//! This module owns the rule (checked at load) and the decision for one call. It must not know
//! how the person is reached.

use serde_json::{Map, Value, json};
use turnstile_plugin_abi::{ConfirmManifest, InputRequest};

use crate::statechart::Condition;

/// The key the host asks a confirmation under (a handler's own keys are its business; this one
/// is the host's, and a name no plugin would pick by chance).
pub const CONFIRM_KEY: &str = "turnstile.confirm";

/// A tool's confirmation, checked and compiled.
pub struct Confirmation {
    message: String,
    /// The form: the manifest's, or an empty object schema for a plain yes or no.
    schema: Value,
    /// The form, compiled: an accepted answer that does not fit it counts as no answer.
    form: jsonschema::Validator,
    when: Option<Condition>,
}

impl std::fmt::Debug for Confirmation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirmation")
            .field("message", &self.message)
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

/// What a call's confirmation comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The binding does not ask for this call (its `when` does not hold).
    NotNeeded,
    /// The person has not answered yet: the request to ask, under [`CONFIRM_KEY`].
    Ask(Map<String, Value>),
    /// The person accepted: the form's content (`{}` for a plain yes).
    Accepted(Value),
    /// The person declined or cancelled: the action they answered.
    Declined(String),
}

/// The field types a flat elicitation form may hold (MCP's `PrimitiveSchemaDefinition`).
const FIELD_TYPES: &[&str] = &["string", "number", "integer", "boolean"];

impl Confirmation {
    /// Checks and compiles `manifest`'s confirmation; the error says what is wrong (prefixed
    /// with the field by the caller).
    pub fn compile(manifest: &ConfirmManifest) -> Result<Confirmation, String> {
        if manifest.message.trim().is_empty() {
            return Err("confirm.message: must not be empty".into());
        }
        let schema = match &manifest.schema {
            None => json!({"type": "object", "properties": {}}),
            Some(schema) => {
                check_form(schema).map_err(|problem| format!("confirm.schema: {problem}"))?;
                schema.clone()
            }
        };
        let form = jsonschema::validator_for(&schema)
            .map_err(|problem| format!("confirm.schema: not a valid JSON Schema: {problem}"))?;
        let when = match &manifest.when {
            None => None,
            Some(rule) => Some(
                Condition::compile(rule).map_err(|problem| format!("confirm.when: {problem}"))?,
            ),
        };
        Ok(Confirmation {
            message: manifest.message.clone(),
            schema,
            form,
            when,
        })
    }

    /// The decision for a call with `arguments` on an instance whose machine context is
    /// `context`, given what the call has been told (`asking`: ABI 1.4's
    /// `{"canAsk", "responses"}`, `null` when nothing may be asked).
    pub fn decide(&self, context: &Value, arguments: &Value, asking: &Value) -> Decision {
        if let Some(when) = &self.when
            && !when.holds(&json!({"context": context, "input": arguments}))
        {
            return Decision::NotNeeded;
        }
        let Some(answer) = asking.get("responses").and_then(|r| r.get(CONFIRM_KEY)) else {
            let request = InputRequest::form(self.message.clone(), self.schema.clone());
            return Decision::Ask(Map::from_iter([(
                CONFIRM_KEY.to_owned(),
                request.to_json(),
            )]));
        };
        match answer.get("action").and_then(Value::as_str) {
            Some("accept") => {
                let content = answer.get("content").cloned().unwrap_or_else(|| json!({}));
                if self.form.is_valid(&content) {
                    Decision::Accepted(content)
                } else {
                    Decision::Declined("an answer that does not fit the form".to_owned())
                }
            }
            Some(action) => Decision::Declined(action.to_owned()),
            None => Decision::Declined("no answer".to_owned()),
        }
    }
}

/// Checks that `schema` is a flat object schema an elicitation form may carry.
fn check_form(schema: &Value) -> Result<(), String> {
    if schema.get("type") != Some(&json!("object")) {
        return Err("must be an object schema (\"type\": \"object\")".into());
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Err("must have \"properties\", an object".into());
    };
    for (name, field) in properties {
        let kind = field
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let multi_select = kind == "array"
            && field
                .get("items")
                .is_some_and(|items| items.get("enum").is_some() || items.get("anyOf").is_some());
        if !FIELD_TYPES.contains(&kind) && !multi_select {
            return Err(format!(
                "field {name:?} is not a string, number, integer, boolean or a multi-select \
                 (a form holds no nested objects)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confirmation(schema: Option<Value>, when: Option<Value>) -> Confirmation {
        Confirmation::compile(&ConfirmManifest {
            message: "Pay out?".into(),
            schema,
            when,
        })
        .unwrap()
    }

    #[test]
    fn asks_until_answered_then_follows_the_answer() {
        let plain = confirmation(None, None);
        let Decision::Ask(requests) = plain.decide(&json!({}), &json!({}), &json!(null)) else {
            panic!("nothing answered yet");
        };
        let request = &requests[CONFIRM_KEY];
        assert_eq!(request["params"]["message"], "Pay out?");
        assert_eq!(request["params"]["requestedSchema"]["type"], "object");
        let told = |answer: Value| json!({"responses": {CONFIRM_KEY: answer}});
        assert_eq!(
            plain.decide(&json!({}), &json!({}), &told(json!({"action": "accept"}))),
            Decision::Accepted(json!({}))
        );
        assert_eq!(
            plain.decide(
                &json!({}),
                &json!({}),
                &told(json!({"action": "accept", "content": {"reference": "R-1"}}))
            ),
            Decision::Accepted(json!({"reference": "R-1"}))
        );
        assert_eq!(
            plain.decide(&json!({}), &json!({}), &told(json!({"action": "decline"}))),
            Decision::Declined("decline".into())
        );
        let form = json!({"type": "object", "properties": {"reference": {"type": "string"}}});
        let with_form = confirmation(Some(form), None);
        assert_eq!(
            with_form.decide(
                &json!({}),
                &json!({}),
                &told(json!({"action": "accept", "content": {"reference": 7}}))
            ),
            Decision::Declined("an answer that does not fit the form".into())
        );
    }

    #[test]
    fn asks_only_when_its_rule_holds() {
        let above = confirmation(None, Some(json!({">": [{"var": "context.amount"}, 1000]})));
        assert_eq!(
            above.decide(&json!({"amount": 10}), &json!({}), &json!(null)),
            Decision::NotNeeded
        );
        assert!(matches!(
            above.decide(&json!({"amount": 5000}), &json!({}), &json!(null)),
            Decision::Ask(_)
        ));
    }

    #[test]
    fn forms_must_be_flat_and_rules_must_compile() {
        let refused = |schema: Option<Value>, when: Option<Value>| {
            Confirmation::compile(&ConfirmManifest {
                message: "?".into(),
                schema,
                when,
            })
            .unwrap_err()
        };
        let nested = json!({"type": "object", "properties": {"a": {"type": "object"}}});
        assert!(refused(Some(nested), None).starts_with("confirm.schema: field \"a\""));
        assert!(refused(Some(json!({"type": "string"})), None).starts_with("confirm.schema"));
        assert!(refused(None, Some(json!({"no_such_op": [1]}))).starts_with("confirm.when"));
        let ok = json!({"type": "object", "properties": {
            "reference": {"type": "string"}, "sure": {"type": "boolean"},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}}}});
        assert!(
            Confirmation::compile(&ConfirmManifest {
                message: "?".into(),
                schema: Some(ok),
                when: None
            })
            .is_ok()
        );
    }
}

//! Human confirmation as part of a tool's binding (issue 40): the plugin-free way to put a
//! person in front of a destructive step (`invoice.discharge`, `payment.capture`).
//!
//! A tool whose manifest declares `confirm` (`turnstile_plugin_abi::ConfirmManifest`) is
//! confirmed before its handler runs, once the gate has let the call through: the host asks
//! with a form under [`CONFIRM_KEY`], by the same means a handler asks (`mcp/handler/asking.rs`: an
//! elicitation on the 2025 revisions, an input-required result on 2026-07-28), and the call runs
//! again with the answer. An accept runs the handler, and the form's content becomes the event's
//! `input.confirmation`, the audit entry's `confirmation` and what the handler is told
//! (`CallContext::confirmation`); a decline or cancel runs nothing and fires nothing
//! (`DECLINED`). A tool bound to no workflow is confirmed the same way, before its handler runs
//! (`mcp/handler/tools.rs`), its `when` reading an empty `context`.
//!
//! Only what was asked is kept (issue 50): the content is the fields the form declares, each
//! bounded (a string by the form's `maxLength`, which the host adds, [`MAX_FIELD_CHARS`], where
//! the form gives none; a multi-select by its `maxItems`, else its number of options), and
//! anything else the client sent is dropped. An answer over a bound does not fit the form.
//!
//! This module owns the rule (checked at load) and the decision for one call. It must not know
//! how the person is reached.

use serde_json::{Map, Value, json};
use turnstile_plugin_abi::{ConfirmManifest, InputRequest};

use crate::statechart::Condition;

/// The key the host asks a confirmation under (a handler's own keys are its business; this one
/// is the host's, under the prefix no plugin may ask under), and tells the handler the kept
/// answer under.
pub use turnstile_plugin_abi::asking::CONFIRM_KEY;

/// The longest string a form's field may hold when the form sets no `maxLength` of its own,
/// in characters: the host adds it to the form the person is shown.
pub const MAX_FIELD_CHARS: u64 = 1024;

/// What `--confirm-fallback allow` keeps as "confirmed" (`mcp/handler/asking.rs` answers with
/// [`fallback_answer`]): that nobody did.
const FALLBACK_NOTE: &str = "no person was asked (--confirm-fallback allow)";

/// The answer the host gives itself for a person a client cannot reach, under
/// `--confirm-fallback allow`: accepted, with a content (`{"fallback": …}`) that
/// [`Decision::Accepted`] keeps as it is, so that the audit trail says nobody confirmed.
pub fn fallback_answer() -> Value {
    json!({"action": "accept", "content": {"fallback": FALLBACK_NOTE}})
}

/// A tool's confirmation, checked and compiled.
pub struct Confirmation {
    message: String,
    /// The form: the manifest's with the host's bounds added ([`bounded`]), or an empty object
    /// schema for a plain yes or no.
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

/// What a handler is told of its asking (ABI 1.4's `{"canAsk", "responses"}`, `asking`) once
/// its binding's confirmation is decided: what the host kept of the person's answer
/// (`Decision::Accepted`'s content) under [`CONFIRM_KEY`], or nothing there when no
/// confirmation was made for this call, whatever the client sent.
pub fn told(mut asking: Value, confirmation: Option<&Value>) -> Value {
    if let Some(Value::Object(responses)) = asking.get_mut("responses") {
        match confirmation {
            Some(content) => {
                let kept = json!({"action": "accept", "content": content});
                responses.insert(CONFIRM_KEY.to_owned(), kept);
            }
            None => {
                responses.remove(CONFIRM_KEY);
            }
        }
    }
    asking
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
                bounded(schema)
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
                let content = match answer.get("content") {
                    None | Some(Value::Null) => json!({}),
                    Some(content) => content.clone(),
                };
                if !self.form.is_valid(&content) {
                    Decision::Declined("an answer that does not fit the form".to_owned())
                } else if *answer == fallback_answer() {
                    // The host's own note that nobody was asked, kept for the audit trail.
                    Decision::Accepted(content)
                } else {
                    Decision::Accepted(self.kept(content))
                }
            }
            Some(action) => Decision::Declined(action.to_owned()),
            None => Decision::Declined("no answer".to_owned()),
        }
    }

    /// What is kept of `content`, an answer that fits the form (so each field it declares is
    /// within its bounds): the fields the form declares, and nothing else.
    fn kept(&self, content: Value) -> Value {
        let Value::Object(fields) = content else {
            return json!({});
        };
        let declared = &self.schema["properties"];
        let kept = fields
            .into_iter()
            .filter(|(name, _)| declared.get(name.as_str()).is_some());
        Value::Object(kept.collect())
    }
}

/// `schema` (a form [`check_form`] passed) with the host's bounds on each field that has none:
/// a free string gets `maxLength` [`MAX_FIELD_CHARS`] (one chosen from options is bounded by
/// them), a multi-select `maxItems` its number of options. A conforming client shows them to
/// the person; the form's validator holds every answer to them.
fn bounded(schema: &Value) -> Value {
    let mut schema = schema.clone();
    let Some(properties) = schema["properties"].as_object_mut() else {
        return schema;
    };
    for field in properties.values_mut() {
        let Some(field) = field.as_object_mut() else {
            continue;
        };
        let chosen = ["enum", "oneOf", "anyOf", "const"]
            .iter()
            .any(|key| field.contains_key(*key));
        match field.get("type").and_then(Value::as_str) {
            Some("string") if !chosen && !field.contains_key("maxLength") => {
                field.insert("maxLength".to_owned(), json!(MAX_FIELD_CHARS));
            }
            Some("array") if !field.contains_key("maxItems") => {
                let options = field.get("items").and_then(|items| {
                    ["enum", "anyOf"]
                        .iter()
                        .find_map(|key| items.get(*key).and_then(Value::as_array))
                });
                let options = options.map_or(0, Vec::len);
                field.insert("maxItems".to_owned(), json!(options));
            }
            _ => {}
        }
    }
    schema
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
            Decision::Accepted(json!({})),
            "a plain yes asks for no field, and keeps none"
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
    fn only_what_the_form_asks_for_is_kept_each_field_bounded() {
        let form = json!({"type": "object", "properties": {
            "reference": {"type": "string"},
            "code": {"type": "string", "maxLength": 4},
            "kind": {"type": "string", "enum": ["wire", "card"]},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}}}});
        let confirm = confirmation(Some(form), None);
        // The form the person is shown carries the bounds.
        let Decision::Ask(requests) = confirm.decide(&json!({}), &json!({}), &json!(null)) else {
            panic!("nothing answered yet");
        };
        let shown = &requests[CONFIRM_KEY]["params"]["requestedSchema"]["properties"];
        assert_eq!(shown["reference"]["maxLength"], MAX_FIELD_CHARS);
        assert_eq!(shown["code"]["maxLength"], 4, "the form's own bound stands");
        assert!(
            shown["kind"].get("maxLength").is_none(),
            "bounded by its options"
        );
        assert_eq!(shown["tags"]["maxItems"], 2);
        let answered = |content: Value| {
            confirm.decide(
                &json!({}),
                &json!({}),
                &json!({"responses": {CONFIRM_KEY: {"action": "accept", "content": content}}}),
            )
        };
        let huge = "x".repeat(3 << 20);
        assert_eq!(
            answered(json!({"reference": "R-1", "tags": ["a"], "note": huge, "deep": {"a": 1}})),
            Decision::Accepted(json!({"reference": "R-1", "tags": ["a"]}))
        );
        let unfit = Decision::Declined("an answer that does not fit the form".into());
        let long = "r".repeat(MAX_FIELD_CHARS as usize + 1);
        assert_eq!(answered(json!({"reference": long})), unfit);
        assert_eq!(answered(json!({"code": "12345"})), unfit);
        assert_eq!(answered(json!({"tags": ["a", "b", "a"]})), unfit);
        assert_eq!(answered(json!("not an object")), unfit);
        // The host's own note, under --confirm-fallback allow, is kept as it is.
        let told = json!({"responses": {CONFIRM_KEY: fallback_answer()}});
        assert_eq!(
            confirm.decide(&json!({}), &json!({}), &told),
            Decision::Accepted(fallback_answer()["content"].clone())
        );
    }

    #[test]
    fn the_handler_is_told_what_the_host_kept_and_nothing_else_under_its_key() {
        let offered = json!({"canAsk": [], "responses": {
            CONFIRM_KEY: {"action": "accept", "content": {"name": "Mallory", "extra": 1}},
            "own": {"action": "accept"}}});
        let kept = json!({"name": "Alice"});
        let told_kept = told(offered.clone(), Some(&kept));
        assert_eq!(
            told_kept["responses"][CONFIRM_KEY],
            json!({"action": "accept", "content": {"name": "Alice"}})
        );
        assert_eq!(told_kept["responses"]["own"], offered["responses"]["own"]);
        let told_nothing = told(offered, None);
        assert!(told_nothing["responses"].get(CONFIRM_KEY).is_none());
        assert_eq!(told(Value::Null, None), Value::Null, "nothing may be asked");
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

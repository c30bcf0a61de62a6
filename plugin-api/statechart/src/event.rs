//! Events sent to a machine.

use serde_json::Value;

use super::error::EventError;

/// An event: its type and an optional JSON payload that guards and assignments may read.
///
/// Guards and assignments see the event as a JSON object ([`Event::to_json`]): `{"type"}` for a
/// bare event, the object itself when one was given. An event fired by a tool call carries the
/// call ([`Event::with_call`]): `{"type", "input", "output"}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    event_type: String,
    payload: Value,
}

impl Event {
    /// An event with no payload (`Value::Null`).
    pub fn new(event_type: impl Into<String>) -> Self {
        Event {
            event_type: event_type.into(),
            payload: Value::Null,
        }
    }

    /// An event carrying `payload`; for an object payload, [`Event::field`] reads its fields,
    /// the way an XState guard reads `event.flag`.
    pub fn with_payload(event_type: impl Into<String>, payload: Value) -> Self {
        Event {
            event_type: event_type.into(),
            payload,
        }
    }

    /// The event a tool call fires: `input` is the call's arguments, `output` the plugin's
    /// structured output; either may be unknown yet (absent from the object, as `undefined` is
    /// absent from a JavaScript event).
    pub fn with_call(
        event_type: impl Into<String>,
        input: Option<Value>,
        output: Option<Value>,
    ) -> Self {
        let event_type = event_type.into();
        let mut object = serde_json::Map::new();
        object.insert("type".into(), Value::String(event_type.clone()));
        if let Some(input) = input {
            object.insert("input".into(), input);
        }
        if let Some(output) = output {
            object.insert("output".into(), output);
        }
        Event {
            event_type,
            payload: Value::Object(object),
        }
    }

    /// The event a failed tool call fires (its binding's `on_error`): `input` is the call's
    /// arguments, `error.message` what the handler said, as XState's error events carry
    /// `error`.
    pub fn with_error(event_type: impl Into<String>, input: Option<Value>, message: &str) -> Self {
        let mut event = Event::with_call(event_type, input, None);
        if let Value::Object(object) = &mut event.payload {
            object.insert("error".into(), serde_json::json!({ "message": message }));
        }
        event
    }

    /// Parses `"SUBMIT"` or `{"type": "SUBMIT", ...}`. In the object form the whole object is the
    /// payload (so `field("type")` is the type, as `event.type` is in XState).
    pub fn from_json(v: &Value) -> Result<Event, EventError> {
        match v {
            Value::String(s) => Ok(Event::new(s.clone())),
            Value::Object(map) => match map.get("type") {
                Some(Value::String(t)) => Ok(Event::with_payload(t.clone(), v.clone())),
                _ => Err(EventError("an event object needs a string \"type\"".into())),
            },
            _ => Err(EventError(
                "an event is a string or an object with a string \"type\"".into(),
            )),
        }
    }

    /// The event's type (`"SUBMIT"`), matched against `on` descriptors.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The payload as given (`Value::Null` when there is none).
    pub fn payload(&self) -> &Value {
        &self.payload
    }

    /// The call's arguments, for an event fired by a tool call.
    pub fn input(&self) -> Option<&Value> {
        self.field("input")
    }

    /// The plugin's structured output, for an event fired by a tool call.
    pub fn output(&self) -> Option<&Value> {
        self.field("output")
    }

    /// The event as guards and assignments see it (XState's event object).
    pub fn to_json(&self) -> Value {
        match &self.payload {
            Value::Object(_) => self.payload.clone(),
            _ => serde_json::json!({ "type": self.event_type }),
        }
    }

    /// A field of an object payload (`event.<name>` in XState terms).
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.payload.as_object().and_then(|m| m.get(name))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_string_and_object_forms() {
        assert_eq!(
            Event::from_json(&json!("SUBMIT")).unwrap().event_type(),
            "SUBMIT"
        );
        let e = Event::from_json(&json!({"type": "GO", "flag": true})).unwrap();
        assert_eq!(e.event_type(), "GO");
        assert_eq!(e.field("flag"), Some(&json!(true)));
        assert!(Event::from_json(&json!({"flag": true})).is_err());
        assert!(Event::from_json(&json!(3)).is_err());
    }

    #[test]
    fn a_call_event_carries_input_and_output() {
        let e = Event::with_call("PAY", Some(json!({"amount": 3})), None);
        assert_eq!(e.to_json(), json!({"type": "PAY", "input": {"amount": 3}}));
        assert_eq!(e.input(), Some(&json!({"amount": 3})));
        assert_eq!(e.output(), None);
        assert_eq!(Event::new("GO").to_json(), json!({"type": "GO"}));
        let parsed = Event::from_json(&json!({"type": "GO", "output": 1})).unwrap();
        assert_eq!(parsed.output(), Some(&json!(1)));
    }
}

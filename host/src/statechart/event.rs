//! Events sent to a machine.

use serde_json::Value;

use super::error::EventError;

/// An event: its type and an optional JSON payload that guards may read.
///
/// Turnstile machines have no context, so the payload only matters to guards
/// ([`super::Guards::eval`]).
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
}

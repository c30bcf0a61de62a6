//! Tool arguments made from a tool's JSON input schema: valid ones, as an agent that read the
//! schema would send, and invalid ones, for `--invalid-rate`.
//!
//! Reads the keywords tool schemas use (`type`, `properties`, `required`, `enum`, `const`,
//! `minimum`/`maximum` and their exclusive forms, `multipleOf`, `minLength`/`maxLength`,
//! `format`, `items`, `minItems`/`maxItems`, `anyOf`/`oneOf`, and `pattern` when a string can be
//! generated from it: anchors only at its ends, no look-around or back-references; a string under
//! another pattern is only as valid as luck makes it). The handle property (handle mode) is left
//! out: the caller sets it.

use rand::Rng;
use serde_json::{Map, Value, json};

/// How deep nested objects and arrays are filled before the generator stops adding optional
/// parts (a recursive schema would otherwise never end).
const MAX_DEPTH: usize = 6;

/// Arguments that satisfy `schema`; `skip` names a property to leave out (the handle key).
pub fn valid(schema: &Value, skip: Option<&str>, rng: &mut impl Rng) -> Value {
    match value_for(schema, skip, rng, 0) {
        Value::Object(map) => Value::Object(map),
        // Tool arguments are an object whatever the schema claims.
        _ => json!({}),
    }
}

/// Arguments that break `schema` in one way (a required property missing, a property of the
/// wrong type, an unexpected property where none are allowed), or `None` when the schema accepts
/// every object.
pub fn invalid(schema: &Value, skip: Option<&str>, rng: &mut impl Rng) -> Option<Value> {
    let Value::Object(mut arguments) = valid(schema, skip, rng) else {
        return None;
    };
    let required: Vec<&str> = string_list(schema.get("required"))
        .filter(|name| Some(*name) != skip)
        .collect();
    if !required.is_empty() {
        let missing = required[rng.random_range(0..required.len())];
        arguments.remove(missing);
        return Some(Value::Object(arguments));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    if let Some((name, property)) = properties
        .into_iter()
        .flatten()
        .find(|(name, property)| Some(name.as_str()) != skip && wrong_type_for(property).is_some())
    {
        arguments.insert(name.clone(), wrong_type_for(property)?);
        return Some(Value::Object(arguments));
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        arguments.insert("unexpected_by_load".into(), json!(1));
        return Some(Value::Object(arguments));
    }
    None
}

fn string_list(value: Option<&Value>) -> impl Iterator<Item = &str> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// A value of a type the property does not allow, if its schema names its types.
fn wrong_type_for(property: &Value) -> Option<Value> {
    let types: Vec<&str> = match property.get("type")? {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => return None,
    };
    [
        json!("not-a-number"),
        json!(12345),
        json!({"unexpected": true}),
    ]
    .into_iter()
    .find(|candidate| !types.iter().any(|t| type_accepts(t, candidate)))
}

fn type_accepts(name: &str, value: &Value) -> bool {
    match name {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn value_for(schema: &Value, skip: Option<&str>, rng: &mut impl Rng, depth: usize) -> Value {
    let Some(schema) = schema.as_object() else {
        // `true` or a schema that is not an object: anything goes.
        return json!("load");
    };
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    if let Some(Value::Array(choices)) = schema.get("enum")
        && !choices.is_empty()
    {
        return choices[rng.random_range(0..choices.len())].clone();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(options)) = schema.get(key)
            && let Some(first) = options.first()
        {
            // The first option: picking among `oneOf` options risks one that matches two.
            return value_for(first, skip, rng, depth + 1);
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .unwrap_or("null"),
        _ if schema.contains_key("properties") => "object",
        _ => "string",
    };
    match kind {
        "object" => object_for(schema, skip, rng, depth),
        "array" => array_for(schema, rng, depth),
        "integer" => integer_for(schema, rng),
        "number" => number_for(schema, rng),
        "boolean" => Value::Bool(rng.random_bool(0.5)),
        "null" => Value::Null,
        _ => string_for(schema, rng),
    }
}

fn object_for(
    schema: &Map<String, Value>,
    skip: Option<&str>,
    rng: &mut impl Rng,
    depth: usize,
) -> Value {
    let required: Vec<&str> = string_list(schema.get("required")).collect();
    let mut object = Map::new();
    for (name, property) in schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if Some(name.as_str()) == skip {
            continue;
        }
        let wanted =
            required.contains(&name.as_str()) || (depth < MAX_DEPTH && rng.random_bool(0.5));
        if wanted {
            object.insert(name.clone(), value_for(property, None, rng, depth + 1));
        }
    }
    Value::Object(object)
}

fn array_for(schema: &Map<String, Value>, rng: &mut impl Rng, depth: usize) -> Value {
    let min = bound(schema, "minItems").unwrap_or(0.0) as usize;
    let max = bound(schema, "maxItems").map_or(min.max(3), |max| max as usize);
    let len = if depth >= MAX_DEPTH {
        min
    } else {
        rng.random_range(min.max(1).min(max)..=max)
    };
    let items = schema.get("items").cloned().unwrap_or(Value::Bool(true));
    let unique = schema.get("uniqueItems") == Some(&Value::Bool(true));
    let mut values: Vec<Value> = Vec::with_capacity(len);
    // Bounded attempts: a small enum cannot give more distinct items than it has.
    for _ in 0..len * 8 {
        if values.len() == len {
            break;
        }
        let value = value_for(&items, None, rng, depth + 1);
        if !unique || !values.contains(&value) {
            values.push(value);
        }
    }
    Value::Array(values)
}

fn bound(schema: &Map<String, Value>, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

/// One end of the interval a number must lie in: the bound, and whether it is allowed itself.
type Edge = Option<(f64, bool)>;

/// The interval a number must lie in, low end then high end. Reads both the draft-6+ form
/// (`exclusiveMinimum: 3`) and the draft-4 one (`exclusiveMinimum: true`).
fn number_range(schema: &Map<String, Value>) -> (Edge, Edge) {
    let edge = |inclusive: &str, exclusive: &str| match (
        bound(schema, inclusive),
        schema.get(exclusive),
    ) {
        (_, Some(Value::Number(n))) => n.as_f64().map(|n| (n, false)),
        (Some(n), Some(Value::Bool(true))) => Some((n, false)),
        (Some(n), _) => Some((n, true)),
        (None, _) => None,
    };
    (
        edge("minimum", "exclusiveMinimum"),
        edge("maximum", "exclusiveMaximum"),
    )
}

fn number_for(schema: &Map<String, Value>, rng: &mut impl Rng) -> Value {
    let (low, high) = number_range(schema);
    let (low, high) = match (low.map(|l| l.0), high.map(|h| h.0)) {
        (Some(low), Some(high)) => (low, high),
        (Some(low), None) => (low, low + 100.0),
        (None, Some(high)) => (high - 100.0, high),
        (None, None) => (1.0, 100.0),
    };
    if let Some(step) = bound(schema, "multipleOf").filter(|step| *step > 0.0) {
        return multiple_in(low, high, step, rng).map_or(json!(low), |n| json!(n));
    }
    // Strictly inside, so exclusive bounds hold; two decimals, as a person would type.
    let value = low + (high - low) * rng.random_range(0.25..0.75);
    let rounded = (value * 100.0).round() / 100.0;
    json!(if rounded > low && rounded < high {
        rounded
    } else {
        value
    })
}

fn integer_for(schema: &Map<String, Value>, rng: &mut impl Rng) -> Value {
    let (low, high) = number_range(schema);
    let low = low.map(|(n, inclusive)| if inclusive { n.ceil() } else { n.floor() + 1.0 });
    let high = high.map(|(n, inclusive)| if inclusive { n.floor() } else { n.ceil() - 1.0 });
    let (low, high) = match (low, high) {
        (Some(low), Some(high)) => (low, high.max(low)),
        (Some(low), None) => (low, low + 100.0),
        (None, Some(high)) => (high - 100.0, high),
        (None, None) => (1.0, 100.0),
    };
    let step = bound(schema, "multipleOf")
        .filter(|step| *step >= 1.0)
        .unwrap_or(1.0);
    let n = multiple_in(low, high, step, rng).unwrap_or(low);
    json!(n as i64)
}

/// A multiple of `step` in `[low, high]`, if there is one.
fn multiple_in(low: f64, high: f64, step: f64, rng: &mut impl Rng) -> Option<f64> {
    let first = (low / step).ceil() as i64;
    let last = (high / step).floor() as i64;
    (first <= last).then(|| rng.random_range(first..=last) as f64 * step)
}

fn string_for(schema: &Map<String, Value>, rng: &mut impl Rng) -> Value {
    let formatted = match schema.get("format").and_then(Value::as_str) {
        Some("date-time") => Some("2026-01-02T03:04:05Z"),
        Some("date") => Some("2026-01-02"),
        Some("time") => Some("03:04:05Z"),
        Some("email") => Some("load@example.com"),
        Some("uri" | "url") => Some("https://example.com/load"),
        Some("uuid") => Some("6f1c2a34-5b6d-4e7f-8a9b-0c1d2e3f4a5b"),
        Some("ipv4") => Some("192.0.2.1"),
        _ => None,
    };
    if let Some(text) = formatted {
        return json!(text);
    }
    if let Some(text) = schema
        .get("pattern")
        .and_then(Value::as_str)
        .and_then(|pattern| matching(pattern, rng))
    {
        return json!(text);
    }
    let max = bound(schema, "maxLength").map_or(usize::MAX, |max| max as usize);
    // Non-empty unless the schema says otherwise; at most a dozen characters unless it must.
    let min = (bound(schema, "minLength").unwrap_or(1.0) as usize).min(max);
    let len = rng.random_range(min..=max.min(min.max(12)));
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let text: String = (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    json!(text)
}

/// A string matching `pattern` (JSON Schema's, unanchored), if one can be generated: a leading
/// `^` and a trailing `$` are dropped (a string the rest matches whole satisfies the pattern with
/// or without them); anything `rand_regex` cannot generate from gives `None`.
fn matching(pattern: &str, rng: &mut impl Rng) -> Option<String> {
    /// Repetitions (`*`, `+`, `{n,}`) are cut off here, keeping generated strings short.
    const MAX_REPEAT: u32 = 8;
    let core = pattern.strip_prefix('^').unwrap_or(pattern);
    let core = match core.strip_suffix('$') {
        Some(inner) if !inner.ends_with('\\') => inner,
        _ => core,
    };
    let regex = rand_regex::Regex::compile(core, MAX_REPEAT).ok()?;
    Some(rng.sample(&regex))
}

#[cfg(test)]
mod tests {
    use rand::{SeedableRng, rngs::StdRng};

    use super::*;

    fn schemas() -> Vec<Value> {
        vec![
            // The invoice plugin's tools, with the handle property handle mode adds.
            json!({"type": "object", "properties": {
                "amount": {"type": "number", "exclusiveMinimum": 0},
                "customer": {"type": "string"}, "handle": {"type": "string"}},
                "required": ["amount", "handle"]}),
            json!({"type": "object", "required": ["currency", "code"], "properties": {
                "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "code": {"type": "string", "pattern": "inv-[0-9a-f]{4}"}}}),
            json!({"type": "object", "properties": {"reason": {"type": "string", "minLength": 1,
                "maxLength": 3}}, "required": ["reason"], "additionalProperties": false}),
            json!({"type": "object", "properties": {
                "priority": {"type": "integer", "minimum": 1, "maximum": 5},
                "batch": {"type": "integer", "exclusiveMinimum": 0, "multipleOf": 10,
                    "exclusiveMaximum": 100},
                "hours": {"type": "number", "minimum": 0.5, "maximum": 8, "multipleOf": 0.5},
                "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1,
                    "maxItems": 3, "uniqueItems": true},
                "when": {"type": "string", "format": "date-time"},
                "flag": {"type": "boolean"},
                "mode": {"const": "fast"},
                "nested": {"type": "object", "properties": {"x": {"type": ["integer", "null"],
                    "maximum": -3}}, "required": ["x"]},
                "either": {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "integer"}]}},
                "required": ["priority", "batch", "hours", "tags", "when", "nested", "either"]}),
            json!({"type": "object"}),
            json!({"type": "object", "properties": {}}),
        ]
    }

    #[test]
    fn valid_arguments_satisfy_their_schema() {
        let mut rng = StdRng::seed_from_u64(7);
        for schema in schemas() {
            let validator = jsonschema::validator_for(&schema).expect("a valid schema");
            for _ in 0..500 {
                let arguments = valid(&schema, Some("handle"), &mut rng);
                let mut with_handle = arguments.clone();
                // The caller adds the handle where the schema has a place for it.
                if schema.pointer("/properties/handle").is_some() {
                    with_handle["handle"] = json!("h");
                }
                assert!(
                    validator.is_valid(&with_handle),
                    "{arguments} breaks {schema}"
                );
                assert!(
                    arguments.get("handle").is_none(),
                    "the handle is the caller's"
                );
            }
        }
    }

    #[test]
    fn invalid_arguments_break_their_schema() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut made = 0;
        for schema in schemas() {
            let validator = jsonschema::validator_for(&schema).expect("a valid schema");
            for _ in 0..200 {
                let Some(mut arguments) = invalid(&schema, Some("handle"), &mut rng) else {
                    continue;
                };
                made += 1;
                if schema.pointer("/properties/handle").is_some() {
                    arguments["handle"] = json!("h");
                }
                assert!(
                    !validator.is_valid(&arguments),
                    "{arguments} satisfies {schema}"
                );
            }
        }
        assert_eq!(made, 800, "four of the schemas can be broken");
        // A schema that accepts any object cannot be broken.
        assert_eq!(invalid(&json!({"type": "object"}), None, &mut rng), None);
    }
}

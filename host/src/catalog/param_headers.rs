//! Tool parameters mirrored into HTTP headers (SEP-2243, protocol 2026-07-28): a property of a
//! tool's input schema annotated `"x-mcp-header": "Region"` is sent by clients as the header
//! `Mcp-Param-Region` beside the body, and the server rejects a call whose header and argument
//! disagree (rmcp's transport does the comparison, given the tool's schema).
//!
//! Checked when a plugin is admitted, so a bad annotation refuses the plugin with the tool and
//! property named instead of confusing every client that reads the list.

use serde_json::Value;

/// The annotation's key in a property's schema.
pub const ANNOTATION: &str = "x-mcp-header";

/// Whether `schema` mirrors any top-level property into a header: only then does a call need
/// its headers compared with its arguments.
pub fn declares_any(schema: &Value) -> bool {
    properties(schema).any(|(_, property)| property.get(ANNOTATION).is_some())
}

/// What is wrong with the header annotations of `schema`, each naming its property: the name
/// must be a non-empty HTTP token, unique ignoring case, on a property whose type is a string,
/// an integer or a boolean (values a header can carry exactly).
pub fn problems(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (name, property) in properties(schema) {
        let Some(annotation) = property.get(ANNOTATION) else {
            continue;
        };
        let at = format!("input schema property \"{name}\": {ANNOTATION}");
        let Some(header) = annotation.as_str() else {
            problems.push(format!("{at} must be a string, not {annotation}"));
            continue;
        };
        if header.is_empty() || !header.bytes().all(is_token_byte) {
            problems.push(format!(
                "{at} \"{header}\" is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)"
            ));
            continue;
        }
        if seen.iter().any(|other| other.eq_ignore_ascii_case(header)) {
            problems.push(format!("{at} \"{header}\" is used by another property too"));
        }
        seen.push(header.to_string());
        let typed = property.get("type").and_then(Value::as_str);
        if !matches!(typed, Some("string" | "integer" | "boolean")) {
            problems.push(format!(
                "{at} needs \"type\" \"string\", \"integer\" or \"boolean\", not {}",
                property
                    .get("type")
                    .map_or("none".to_string(), Value::to_string)
            ));
        }
    }
    problems
}

fn properties(schema: &Value) -> impl Iterator<Item = (&String, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
}

/// RFC 9110 `tchar`.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_well_formed_annotation_passes_and_is_found() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "count": {"type": "integer", "x-mcp-header": "Count"},
            "query": {"type": "string"}
        }});
        assert!(problems(&schema).is_empty());
        assert!(declares_any(&schema));
        assert!(!declares_any(
            &json!({"properties": {"q": {"type": "string"}}})
        ));
    }

    #[test]
    fn bad_annotations_are_named() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "Bad Name"},
            "b": {"type": "number", "x-mcp-header": "B"},
            "c": {"type": "string", "x-mcp-header": "b"},
            "d": {"type": "string", "x-mcp-header": 7}
        }});
        let found = problems(&schema);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found[0].contains("\"a\"") && found[0].contains("not an HTTP header name"));
        assert!(found[1].contains("\"b\"") && found[1].contains("\"number\""));
        assert!(found[2].contains("\"c\"") && found[2].contains("another property"));
        assert!(found[3].contains("\"d\"") && found[3].contains("must be a string"));
    }
}

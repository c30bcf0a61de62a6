//! JSON Schemas derived from Rust types with `schemars`, cleaned into what a model reads.
//!
//! A tool's schemas are shown to models, not to validators only, so they should read like the
//! ones a person writes by hand: one object with `properties`, `required` and a `description` per
//! property (from the field's doc comment). What `schemars` adds for the sake of a standalone
//! schema document goes: the `$schema` URI, the root `title` (the Rust type's name) and root
//! `description` (the type's doc comment; the tool has a description of its own), `$defs` with
//! `$ref`s (inlined instead; only a recursive type keeps them, as it must), and `format`s that
//! are not JSON Schema's (`double`, `uint64`: Rust's integer widths). In input schemas an
//! `Option` field is simply not required: `null` is dropped from its type, so a model leaves
//! the field out instead of sending `null` (the host checks arguments against this schema). An
//! object without fields still spells out `"properties": {}`.
//!
//! This module must not decide anything else about a tool: it only turns a type into a schema.

use schemars::{
    JsonSchema,
    generate::SchemaSettings,
    transform::{RestrictFormats, Transform},
};
use serde_json::{Map, Value};

/// The input schema for arguments of type `T`: how `T` is deserialised.
pub(crate) fn input<T: JsonSchema>() -> Value {
    let mut schema = derive::<T>(SchemaSettings::draft2020_12().for_deserialize());
    drop_null_from_optional(&mut schema);
    schema
}

/// The output schema for results of type `T`: how `T` is serialised.
pub(crate) fn output<T: JsonSchema>() -> Value {
    derive::<T>(SchemaSettings::draft2020_12().for_serialize())
}

/// Whether `schema` describes a JSON object (what MCP requires of input and output schemas).
pub(crate) fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

fn derive<T: JsonSchema>(settings: SchemaSettings) -> Value {
    let generator = settings
        .with(|settings| settings.inline_subschemas = true)
        // Reads `$schema` to know which formats the draft defines, so it runs before that goes.
        .with_transform(RestrictFormats::default())
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(root) = &mut schema {
        root.remove("$schema");
        root.remove("title");
        root.remove("description");
        // An empty struct says `{"type": "object"}`; some clients want `properties` spelt out.
        if root.get("type").and_then(Value::as_str) == Some("object") {
            root.entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
        }
        // Inlining leaves definitions only for recursive types, whose `$ref`s still need them.
        if root
            .get("$defs")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            root.remove("$defs");
        }
    }
    schema
}

/// In every object schema under `schema`, a property that is not required loses the `null` that
/// `schemars` allows for an `Option`: omitting the property already says "none".
fn drop_null_from_optional(schema: &mut Value) {
    let mut transform = |schema: &mut schemars::Schema| {
        if let Some(object) = schema.as_object_mut() {
            drop_null_in_object(object);
        }
    };
    if let Ok(mut root) = schemars::Schema::try_from(std::mem::take(schema)) {
        schemars::transform::RecursiveTransform(&mut transform).transform(&mut root);
        *schema = root.to_value();
    }
}

fn drop_null_in_object(object: &mut Map<String, Value>) {
    let required: Vec<String> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(|name| name.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let Some(Value::Object(properties)) = object.get_mut("properties") else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        if required.contains(name) {
            continue;
        }
        if let Value::Object(property) = property {
            drop_null(property);
        }
    }
}

/// `{"type": ["string", "null"]}` becomes `{"type": "string"}`; `{"anyOf": [X, {"type":
/// "null"}], ...}` becomes X with the other keywords kept (its description); a `null` default
/// goes. Anything else is left as it is.
fn drop_null(property: &mut Map<String, Value>) {
    if property.get("default") == Some(&Value::Null) {
        property.remove("default");
    }
    if let Some(Value::Array(types)) = property.get_mut("type") {
        types.retain(|kind| kind != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            property.insert("type".to_owned(), only);
        }
        return;
    }
    let Some(Value::Array(alternatives)) = property.get("anyOf") else {
        return;
    };
    let is_null = |schema: &Value| schema.get("type").and_then(Value::as_str) == Some("null");
    let rest: Vec<&Value> = alternatives
        .iter()
        .filter(|schema| !is_null(schema))
        .collect();
    if let [Value::Object(only)] = rest.as_slice()
        && rest.len() < alternatives.len()
    {
        let only = only.clone();
        property.remove("anyOf");
        for (key, value) in only {
            property.entry(key).or_insert(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    /// Not part of the schema: the tool has its own description.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Submit {
        /// Amount to bill, greater than zero.
        #[schemars(extend("exclusiveMinimum" = 0))]
        amount: f64,
        /// Customer name.
        customer: Option<String>,
        /// How many copies.
        copies: Option<u32>,
        /// Where to send it.
        address: Option<Address>,
        tags: Vec<String>,
    }

    /// A postal address.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Address {
        /// Street and number.
        street: String,
    }

    #[derive(Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Receipt {
        /// The invoice's number.
        number: u64,
        note: Option<String>,
    }

    #[test]
    fn an_input_schema_is_one_plain_object_with_descriptions_from_doc_comments() {
        assert_eq!(
            input::<Submit>(),
            json!({
                "type": "object",
                "properties": {
                    "amount": {"type": "number", "exclusiveMinimum": 0,
                        "description": "Amount to bill, greater than zero."},
                    "customer": {"type": "string", "description": "Customer name."},
                    "copies": {"type": "integer", "minimum": 0, "description": "How many copies."},
                    "address": {"type": "object", "description": "Where to send it.",
                        "properties": {"street": {"type": "string",
                            "description": "Street and number."}},
                        "required": ["street"]},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["amount", "tags"]
            })
        );
    }

    #[test]
    fn an_output_schema_keeps_null_where_the_type_serialises_it() {
        let schema = output::<Receipt>();
        assert_eq!(
            schema["properties"]["note"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            schema["properties"]["number"],
            json!({"type": "integer", "minimum": 0, "description": "The invoice's number."})
        );
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
    }

    #[test]
    fn a_recursive_type_keeps_the_definitions_its_references_need() {
        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Node {
            children: Vec<Node>,
        }
        let schema = input::<Node>();
        let reference = schema["properties"]["children"]["items"]["$ref"]
            .as_str()
            .expect("a reference");
        assert!(
            reference == "#" || schema.get("$defs").is_some(),
            "{schema}"
        );
    }

    #[test]
    fn only_objects_are_object_schemas() {
        assert!(is_object_schema(&input::<Submit>()));
        assert!(!is_object_schema(&input::<String>()));
    }
}

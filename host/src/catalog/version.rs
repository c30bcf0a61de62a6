//! A workflow machine's version: a hash of its definition's canonical JSON.
//!
//! Two plugins (or two builds of one) that bring the same machine, however their JSON was laid
//! out, get the same version; any change to a state, transition or option gets a new one. The
//! version is what an instance record names to say which machine it runs on.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The first 16 bytes of SHA-256 over [`canonical`] JSON, as 32 lowercase hex digits.
pub fn machine_version(definition: &Value) -> String {
    let digest = Sha256::digest(canonical(definition).as_bytes());
    digest[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// `value` as JSON text with object keys sorted at every level and no insignificant
/// whitespace. (Written out rather than relying on `serde_json::Map` ordering, which a crate
/// elsewhere in the build could switch to insertion order with the `preserve_order` feature.)
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                write_canonical(&object[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_version_ignores_layout_and_follows_content() {
        let a = json!({"id": "m", "initial": "a", "states": {"a": {}, "b": {"type": "final"}}});
        let b: Value = serde_json::from_str(
            r#"{ "states": {"b": {"type": "final"}, "a": {}}, "initial": "a", "id": "m" }"#,
        )
        .unwrap();
        assert_eq!(machine_version(&a), machine_version(&b));
        assert_eq!(machine_version(&a).len(), 32);
        let renamed =
            json!({"id": "m", "initial": "a", "states": {"a": {}, "c": {"type": "final"}}});
        assert_ne!(machine_version(&a), machine_version(&renamed));
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let value = json!({"b": [{"z": 1, "y": "\"q\""}], "a": null});
        assert_eq!(canonical(&value), r#"{"a":null,"b":[{"y":"\"q\"","z":1}]}"#);
    }
}

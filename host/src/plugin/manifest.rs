//! Parsing and checking a plugin's manifest JSON.
//!
//! This module owns reading a manifest: its shape (through the serde types of
//! `turnstile-plugin-abi`, with the JSON path of the first mismatch), then the local rules,
//! which are the ABI crate's one [`Manifest::check`] (the SDK runs the same one), and whether
//! the function table can produce the content the manifest promises. It must not check
//! bindings against workflow machines (does `invoice.submit`'s state exist?): the catalog does
//! that with the statechart engine, across all plugins.

use turnstile_plugin_abi::Manifest;

/// Parses `bytes` and checks the result; the error is a one-line reason naming the field.
pub(super) fn parse(bytes: &[u8]) -> Result<Manifest, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let manifest: Manifest = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })?;
    de.end().map_err(|err| err.to_string())?;
    manifest.check()?;
    Ok(manifest)
}

/// Every prompt and fixed resource without static `text` needs the plugin's `read` (ABI 1.3),
/// and so does every template: checked once the function table is known.
pub(super) fn check_content_source(manifest: &Manifest, reads: bool) -> Result<(), String> {
    if reads {
        return Ok(());
    }
    let without = |what: &str| {
        format!(
            "{what} has no text, and the plugin has no read entry point (ABI 1.3) to produce it"
        )
    };
    if let Some((i, prompt)) = (manifest.prompts.iter().enumerate()).find(|(_, p)| p.text.is_none())
    {
        return Err(without(&format!("prompts[{i}] ({})", prompt.name)));
    }
    if let Some((i, resource)) =
        (manifest.resources.iter().enumerate()).find(|(_, r)| r.text.is_none())
    {
        return Err(without(&format!("resources[{i}] ({})", resource.uri)));
    }
    if let Some(template) = manifest.resource_templates.first() {
        return Err(format!(
            "resource_templates[0] ({}): a template's content comes from the plugin's read entry \
             point (ABI 1.3), which the plugin does not have",
            template.uri_template
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn tool(name: &str) -> Value {
        json!({"name": name, "description": "d", "input_schema": {"type": "object"}})
    }

    fn parse_value(value: Value) -> Result<Manifest, String> {
        parse(value.to_string().as_bytes())
    }

    #[test]
    fn accepts_a_minimal_manifest() {
        let manifest =
            parse_value(json!({"name": "p", "version": "1", "tools": [tool("p.a")]})).unwrap();
        assert_eq!(manifest.tools[0].name, "p.a");
    }

    #[test]
    fn shape_errors_name_the_field() {
        let mut bad = tool("p.a");
        bad["states"] = json!("draft");
        let err = parse_value(json!({"name": "p", "version": "1", "tools": [tool("p.b"), bad]}))
            .unwrap_err();
        assert!(
            err.starts_with("tools[1].states: invalid type: string"),
            "{err}"
        );
        let err = parse(b"{\"name\": \"p\"").unwrap_err();
        assert!(err.contains("EOF"), "{err}");
        let err = parse(b"{\"name\":\"p\",\"version\":\"1\"} trailing").unwrap_err();
        assert!(err.contains("trailing"), "{err}");
    }

    #[test]
    fn content_without_text_needs_the_read_entry_point() {
        let manifest = parse_value(json!({"name": "p", "version": "1",
            "prompts": [{"name": "p.a", "description": "d", "text": "hi"},
                        {"name": "p.b", "description": "d"}]}))
        .unwrap();
        assert_eq!(check_content_source(&manifest, true), Ok(()));
        let err = check_content_source(&manifest, false).unwrap_err();
        assert!(
            err.starts_with("prompts[1] (p.b) has no text, and the plugin has no read"),
            "{err}"
        );
    }
}

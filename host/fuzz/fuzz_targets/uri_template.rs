//! Fuzz target: a resource template (the first line) matched against a URI (the second) and
//! expanded with the variables it found, as the server serves `resources/read`.
#![no_main]

use turnstile_plugin_abi::uri_template::{expand_template, match_template, template_variables};

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let (template, uri) = text.split_once('\n').unwrap_or((text, ""));
    if template_variables(template).is_err() {
        return;
    }
    if let Some(variables) = match_template(template, uri) {
        let _ = expand_template(template, &variables);
    }
});

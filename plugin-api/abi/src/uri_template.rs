//! URI templates as prompts and resources use them: literal text and `{name}` variables (RFC
//! 6570 level 1, without operators), shared by the SDK (which checks a declaration) and the host
//! (which matches the URI a client reads against the templates the plugins declare).
//!
//! A variable matches one or more characters other than `/`, up to the literal text that
//! follows it, so `invoice://{handle}/lines/{line}` names `invoice://h-1/lines/3`. Two variables
//! must be separated by literal text, or where one ends would be a guess.

use std::collections::BTreeMap;

/// The variables of a URI template, in order: the names between `{` and `}`. `Err` names what
/// is wrong with the template (an unclosed or empty variable, or an operator such as `{+x}`,
/// which the host's matcher does not support).
pub fn template_variables(template: &str) -> Result<Vec<&str>, String> {
    let mut variables = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("{template:?}: a '{{' is never closed"))?;
        let name = &after[..end];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "{template:?}: variable {{{name}}} must be a name of A-Z a-z 0-9 _ (no operators)"
            ));
        }
        variables.push(name);
        rest = &after[end + 1..];
        if rest.starts_with('{') {
            return Err(format!(
                "{template:?}: two variables must be separated by literal text"
            ));
        }
    }
    if rest.contains('}') {
        return Err(format!("{template:?}: a '}}' is never opened"));
    }
    Ok(variables)
}

/// The template's value for each variable in `uri`, if `uri` matches it: the literal parts must
/// be equal, and each variable matches one or more characters other than `/` and the literal
/// text that follows it.
pub fn match_template(template: &str, uri: &str) -> Option<BTreeMap<String, String>> {
    let mut variables = BTreeMap::new();
    let (mut template, mut uri) = (template, uri);
    loop {
        let Some(start) = template.find('{') else {
            return (template == uri).then_some(variables);
        };
        uri = uri.strip_prefix(&template[..start])?;
        let end = start + template[start..].find('}')?;
        let name = &template[start + 1..end];
        template = &template[end + 1..];
        let literal_end = template.find('{').unwrap_or(template.len());
        let next_literal = &template[..literal_end];
        let value_end = if next_literal.is_empty() {
            uri.len()
        } else {
            uri.find(next_literal)?
        };
        let value = &uri[..value_end];
        if value.is_empty() || value.contains('/') {
            return None;
        }
        variables.insert(name.to_owned(), value.to_owned());
        uri = &uri[value_end..];
    }
}

/// The URI `template` names with `variables` filled in (a variable left out stays as it is).
pub fn expand_template(template: &str, variables: &BTreeMap<String, String>) -> String {
    let mut uri = template.to_owned();
    for (name, value) in variables {
        uri = uri.replace(&format!("{{{name}}}"), value);
    }
    uri
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_expand_and_are_checked() {
        let found = match_template("invoice://{handle}/lines/{line}", "invoice://h-1/lines/3");
        assert_eq!(
            found,
            Some(BTreeMap::from([
                ("handle".to_owned(), "h-1".to_owned()),
                ("line".to_owned(), "3".to_owned())
            ]))
        );
        assert_eq!(
            expand_template("invoice://{handle}/lines/{line}", &found.unwrap()),
            "invoice://h-1/lines/3"
        );
        for miss in [
            "invoice://",
            "invoice://a/b",
            "other://h",
            "invoice://h/lines/",
        ] {
            assert_eq!(
                match_template("invoice://{handle}/lines/{line}", miss),
                None,
                "{miss}"
            );
        }
        assert_eq!(
            match_template("a://fixed", "a://fixed"),
            Some(BTreeMap::new())
        );
        assert_eq!(template_variables("x://{a}/{b}"), Ok(vec!["a", "b"]));
        for bad in ["x://{a", "x://{}", "x://{+a}", "x://{a}{b}", "x://a}"] {
            assert!(template_variables(bad).is_err(), "{bad}");
        }
    }
}

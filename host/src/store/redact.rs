//! What a stored thing may show of itself: a store URL in logs, errors and `--print-config`,
//! with its passwords replaced, and an instance's context on an operator's screen, with the
//! values of secret-looking keys replaced.

use serde_json::Value;

/// Key names (lower case, `-` and `_` removed) whose values [`redact_context`] hides: a key
/// holding one of these is taken for a secret.
const SECRET_WORDS: [&str; 9] = [
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "credential",
    "privatekey",
    "authorization",
    "cookie",
];

/// `context` with the value of every key that names a secret (`password`, `apiKey`,
/// `client_secret`, `accessToken`, …, at any depth) shown as `"***"`, as `--print-config` shows
/// a plugin's configuration values. For the console and `turnstile instances show`: a workflow's
/// context is the plugin's data, and an operator's screen is no place for its credentials.
pub fn redact_context(context: &Value) -> Value {
    match context {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let folded: String = key
                        .chars()
                        .filter(|c| *c != '_' && *c != '-')
                        .flat_map(char::to_lowercase)
                        .collect();
                    let secret = SECRET_WORDS.iter().any(|word| folded.contains(word));
                    let shown = if secret && !value.is_null() {
                        Value::String("***".into())
                    } else {
                        redact_context(value)
                    };
                    (key.clone(), shown)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact_context).collect()),
        other => other.clone(),
    }
}

/// `url` without its password, for messages, logs and `--print-config`:
/// `redis://user:secret@h/0` → `redis://user:***@h/0`; a `password` query parameter
/// (`postgres://u@h/db?password=secret`, which PostgreSQL accepts) is masked too.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let masked = if user.len() == userinfo.len() {
                user.to_owned()
            } else {
                format!("{user}:***")
            };
            format!("{masked}{}", &rest[at..])
        }
        None => rest.to_owned(),
    };
    let Some(query) = query else {
        return format!("{scheme}://{rest}");
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{scheme}://{rest}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{redact, redact_context};

    #[test]
    fn a_context_shows_everything_but_its_secrets() {
        let context = json!({"amount": 5, "customer": {"name": "Ada", "apiKey": "k1"},
            "client_secret": "s", "items": [{"accessToken": "t", "sku": "x"}], "password": null});
        assert_eq!(
            redact_context(&context),
            json!({"amount": 5, "customer": {"name": "Ada", "apiKey": "***"},
                "client_secret": "***", "items": [{"accessToken": "***", "sku": "x"}],
                "password": null})
        );
    }

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h"), "redis://:***@h");
        assert_eq!(
            redact("postgres://postgres@h/test"),
            "postgres://postgres@h/test"
        );
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("memory:"), "memory:");
        assert_eq!(
            redact("postgres://u:pw@h/db?sslmode=require&password=pw2"),
            "postgres://u:***@h/db?sslmode=require&password=***"
        );
        assert_eq!(redact("redis://h?db=1"), "redis://h?db=1");
        assert_eq!(
            redact("redis+cluster://u:pw@h1:1,h2:2"),
            "redis+cluster://u:***@h1:1,h2:2"
        );
    }
}

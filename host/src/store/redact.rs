//! A store URL as it may be shown: in logs, errors and `--print-config`, with its passwords
//! replaced.

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
    use super::redact;

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

//! The instance as a resource: `turnstile://{workflow}/{handle}` (`turnstile://{workflow}/session`
//! for a session's own instance), a template the host offers for every loaded workflow.
//!
//! Reading it tells a client where an instance is and what it may do next, without calling a
//! tool; subscribing to it (`resources/subscribe` on the 2025 revisions, `resourceSubscriptions`
//! of a 2026-07-28 `subscriptions/listen`) brings one `notifications/resources/updated` per
//! transition, whoever made it. Its URI names its instance like a plugin's instance resource
//! (`invoice://{handle}`), so the same rules find it, under the caller's tenant.

/// The URI scheme of the host's own resources.
pub const SCHEME: &str = "turnstile://";

/// How many of the newest audit entries a read shows.
pub const AUDIT_ENTRIES: usize = 5;

/// The template for instances of `workflow`.
pub fn template(workflow: &str) -> String {
    format!("{SCHEME}{workflow}/{{handle}}")
}

/// The workflow and the instance token (a handle, or `session`) of a host resource URI; `None`
/// for any other URI.
pub fn parse(uri: &str) -> Option<(&str, &str)> {
    let (workflow, token) = uri.strip_prefix(SCHEME)?.split_once('/')?;
    (!workflow.is_empty() && !token.is_empty() && !token.contains('/')).then_some((workflow, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_a_workflow_and_an_instance() {
        assert_eq!(template("invoice"), "turnstile://invoice/{handle}");
        assert_eq!(
            parse("turnstile://invoice/invoice-0a"),
            Some(("invoice", "invoice-0a"))
        );
        assert_eq!(
            parse("turnstile://invoice/session"),
            Some(("invoice", "session"))
        );
        for other in [
            "invoice://invoice-0a",
            "turnstile://invoice",
            "turnstile://invoice/",
            "turnstile:///h",
            "turnstile://invoice/a/b",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }
}

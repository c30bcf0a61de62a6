//! What a store URL names: `nats://[user:password@]host[:port][?bucket=name]`.
//!
//! This module owns reading the URL and what of it may be shown: the password goes to the
//! client and nowhere else (not in `describe`, not in an error).

use turnstile::store::StoreError;

/// A parsed store URL.
pub(crate) struct Address {
    /// What the client connects to, credentials included.
    pub server: String,
    /// The bucket: `?bucket=`, else the store namespace.
    pub bucket: String,
    /// The server and bucket without the password, for `describe` and errors.
    pub shown: String,
}

impl Address {
    /// What `url` names, the bucket defaulting to `namespace`; [`StoreError::Config`] for a URL
    /// that is not a `nats://` one with a host, or names an unknown parameter or a bad bucket.
    pub(crate) fn parse(url: &str, namespace: &str) -> Result<Self, StoreError> {
        let config = |reason: String| StoreError::Config(format!("NATS store URL: {reason}"));
        let mut parsed = url::Url::parse(url).map_err(|e| config(format!("not a URL: {e}")))?;
        if parsed.scheme() != "nats" {
            return Err(config(format!(
                "the scheme must be nats, not {}",
                parsed.scheme()
            )));
        }
        let host = parsed.host_str().unwrap_or_default().to_owned();
        if host.is_empty() {
            return Err(config("names no host".to_owned()));
        }
        let mut bucket = namespace.to_owned();
        for (name, value) in parsed.query_pairs() {
            match &*name {
                "bucket" => bucket = value.into_owned(),
                other => return Err(config(format!("unknown parameter {other:?}"))),
            }
        }
        let bucket_ok = !bucket.is_empty()
            && bucket
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !bucket_ok {
            return Err(config(format!(
                "bucket {bucket:?} must be one or more of [A-Za-z0-9_-]"
            )));
        }
        parsed.set_query(None);
        let server = parsed.to_string();
        // Setting no password cannot fail on a URL with a host.
        let _ = parsed.set_password(None);
        let shown = format!(
            "nats://{}{host}:{} (bucket {bucket})",
            match parsed.username() {
                "" => String::new(),
                user => format!("{user}@"),
            },
            parsed.port().unwrap_or(4222)
        );
        Ok(Self {
            server,
            bucket,
            shown,
        })
    }
}

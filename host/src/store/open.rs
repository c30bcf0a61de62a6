//! Which store a URL names, opened.

use std::sync::Arc;

use super::{
    EmbeddedStore, MemoryStore, PostgresStore, RedisStore, StateStore, StoreError, StoreOptions,
};

/// Opens the store a URL names:
///
/// - `memory:` — [`MemoryStore`];
/// - `embedded:/path/to/file.redb`, or a plain path (absolute, `./…`, or ending in `.redb`) —
///   [`EmbeddedStore`], creating the file and its parent directories on first start;
/// - `redis://…` — [`RedisStore`] on one server; `redis+cluster://h1:p1,h2:p2,…` on a Redis
///   Cluster (`rediss://` is recognised but refused with [`StoreError::Config`]: no TLS support
///   is built in);
/// - `postgres://…`, `postgresql://…` — [`PostgresStore`], creating or migrating its table
///   (plain TCP or a Unix socket; no TLS).
///
/// Remote stores are contacted before this returns: a server that is down gives
/// [`StoreError::Unavailable`] within `options.connect_timeout` (plus one op timeout).
pub async fn open(url: &str, options: &StoreOptions) -> Result<Arc<dyn StateStore>, StoreError> {
    options.check_namespace()?;
    if url == "memory:" || url == "memory" {
        return Ok(Arc::new(
            MemoryStore::new().keeping_audit(options.audit_keep),
        ));
    }
    if let Some(path) = url.strip_prefix("embedded:") {
        return Ok(Arc::new(
            EmbeddedStore::open_keeping(path, options.audit_keep).await?,
        ));
    }
    if url.starts_with("redis://")
        || url.starts_with("rediss://")
        || url.starts_with("redis+cluster://")
    {
        return Ok(Arc::new(RedisStore::connect(url, options).await?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Arc::new(PostgresStore::connect(url, options).await?));
    }
    if !url.contains("://")
        && (url.starts_with('/') || url.starts_with("./") || url.ends_with(".redb"))
    {
        return Ok(Arc::new(
            EmbeddedStore::open_keeping(url, options.audit_keep).await?,
        ));
    }
    Err(StoreError::Config(format!(
        "unknown state store URL {url:?}: expected memory:, embedded:PATH, a path, redis://, redis+cluster:// or postgres://"
    )))
}

#[cfg(test)]
mod tests {
    use super::{StoreError, StoreOptions, open};

    #[tokio::test]
    async fn open_picks_the_store_from_the_url() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions::default();
        assert_eq!(
            open("memory:", &options).await.unwrap().describe(),
            "memory:"
        );
        let explicit = dir.path().join("x/one.redb");
        let store = open(&format!("embedded:{}", explicit.display()), &options)
            .await
            .unwrap();
        assert!(store.describe().ends_with("x/one.redb"));
        assert!(explicit.exists());
        let plain = dir.path().join("two.redb");
        open(plain.to_str().unwrap(), &options).await.unwrap();
        assert!(plain.exists());
        for bad in [
            "ftp://x",
            "relative-name",
            "",
            "embedded:",
            "rediss://127.0.0.1:1",
        ] {
            assert!(
                matches!(open(bad, &options).await, Err(StoreError::Config(_))),
                "{bad}"
            );
        }
        let bad_ns = StoreOptions {
            namespace: "Bad-Name".into(),
            ..StoreOptions::default()
        };
        assert!(matches!(
            open("memory:", &bad_ns).await,
            Err(StoreError::Config(_))
        ));
    }
}

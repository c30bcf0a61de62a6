//! Which store a URL names, opened: the built-in ones, and those a program built on the host
//! registered under a scheme of their own ([`Stores`], `cli::main_with`).

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, OnceLock},
};

use super::{
    EmbeddedStore, MemoryStore, PostgresStore, RedisStore, StateStore, StoreError, StoreOptions,
};

/// What a registered store's `open` returns, boxed so stores of any type sit in one table.
type Opening = Pin<Box<dyn Future<Output = Result<Arc<dyn StateStore>, StoreError>> + Send>>;
/// A registered store's `open`: the whole URL, and the options `serve` and the other
/// subcommands were given.
type Opener = Box<dyn Fn(String, StoreOptions) -> Opening + Send + Sync>;

/// The stores a program adds to the built-in ones, each under a URL scheme: what
/// `turnstile::cli::main_with` hands its caller to fill. Then `--store SCHEME://…` (and every
/// other place a store URL is taken: `turnstile instances`, `check --store`) opens the
/// registered store, as `redis://…` opens the built-in one.
#[derive(Default)]
pub struct Stores {
    schemes: Vec<(String, Opener)>,
}

impl Stores {
    /// Opens URLs of `scheme` (`"mysql"` takes `mysql://…` and `mysql:…`) with `open`, given
    /// the whole URL and the store options (the namespace, timeouts, how much audit to keep).
    /// A scheme registered twice is opened by the later registration; the built-in schemes
    /// (`memory`, `embedded`, `redis`, `redis+cluster`, `postgres`, `postgresql`) cannot be
    /// replaced, so a URL means the same store in every build.
    pub fn register<O, F, S>(&mut self, scheme: &str, open: O) -> &mut Self
    where
        O: Fn(String, StoreOptions) -> F + Send + Sync + 'static,
        F: Future<Output = Result<S, StoreError>> + Send + 'static,
        S: StateStore + 'static,
    {
        let opener: Opener = Box::new(move |url, options| {
            let opening = open(url, options);
            Box::pin(async move { Ok(Arc::new(opening.await?) as Arc<dyn StateStore>) })
        });
        self.schemes.retain(|(known, _)| known != scheme);
        self.schemes.push((scheme.to_owned(), opener));
        self
    }

    /// Opens URLs of `scheme` as `store`, a store the program opened itself (a program that
    /// runs Turnstile inside itself and keeps a handle on what it serves from). Every URL of the
    /// scheme is this one store, whatever follows the scheme.
    pub fn register_opened(&mut self, scheme: &str, store: Arc<dyn StateStore>) -> &mut Self {
        let opener: Opener = Box::new(move |_, _| {
            let store = store.clone();
            Box::pin(async move { Ok(store) })
        });
        self.schemes.retain(|(known, _)| known != scheme);
        self.schemes.push((scheme.to_owned(), opener));
        self
    }

    /// The schemes registered, in the order given, for an error naming what is known.
    fn names(&self) -> impl Iterator<Item = &str> {
        self.schemes.iter().map(|(scheme, _)| scheme.as_str())
    }

    fn opener_for(&self, url: &str) -> Option<&Opener> {
        self.schemes
            .iter()
            .rev()
            .find(|(scheme, _)| {
                url.strip_prefix(scheme.as_str())
                    .is_some_and(|rest| rest.starts_with(':'))
            })
            .map(|(_, opener)| opener)
    }

    /// Makes these the stores every [`open`] in this process consults, once: a second call
    /// (a program that embeds the host twice) gets its stores back as the error.
    pub fn install(self) -> Result<(), Stores> {
        REGISTERED.set(self)
    }
}

/// The stores registered for this process ([`Stores::install`]); none in plain `turnstile`.
static REGISTERED: OnceLock<Stores> = OnceLock::new();

/// Opens the store a URL names, refusing one that says it is shared and keeps no leases: two
/// servers on it could run one instance's handler at once (see [`StateStore::keeps_leases`]).
pub async fn open(url: &str, options: &StoreOptions) -> Result<Arc<dyn StateStore>, StoreError> {
    refuse_shared_without_leases(open_unchecked(url, options).await?)
}

fn refuse_shared_without_leases(
    store: Arc<dyn StateStore>,
) -> Result<Arc<dyn StateStore>, StoreError> {
    if store.is_shared() && !store.keeps_leases() {
        return Err(StoreError::Config(format!(
            "the state store {} says it is shared by several servers (is_shared) but keeps no \
             leases (keeps_leases): two servers could run one instance's handler at once; \
             implement the lease methods and keeps_leases, or say it is not shared",
            store.describe()
        )));
    }
    Ok(store)
}

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
/// - any scheme a program registered ([`Stores`]).
///
/// Remote stores are contacted before this returns: a server that is down gives
/// [`StoreError::Unavailable`] within `options.connect_timeout` (plus one op timeout).
async fn open_unchecked(
    url: &str,
    options: &StoreOptions,
) -> Result<Arc<dyn StateStore>, StoreError> {
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
    if let Some(open) = REGISTERED.get().and_then(|stores| stores.opener_for(url)) {
        return open(url.to_owned(), options.clone()).await;
    }
    let registered: String = REGISTERED
        .get()
        .into_iter()
        .flat_map(Stores::names)
        .map(|scheme| format!(", {scheme}://"))
        .collect();
    Err(StoreError::Config(format!(
        "unknown state store URL {:?}: expected memory:, embedded:PATH, a path, redis://, redis+cluster://, postgres://{registered}",
        super::redact(url)
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{StoreError, StoreOptions, Stores, open, refuse_shared_without_leases};
    use crate::store::{AuditEntry, Fence, InstanceRecord, MemoryStore, StateStore, Tombstone};

    /// A store that says it is shared and keeps no leases: the memory store's records, with
    /// only the required methods (so every optional part is the trait's default).
    struct SharedWithoutLeases(MemoryStore);

    #[async_trait::async_trait]
    impl StateStore for SharedWithoutLeases {
        fn describe(&self) -> String {
            "unleased:".into()
        }
        fn is_shared(&self) -> bool {
            true
        }
        async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
            self.0.load(key).await
        }
        async fn save(&self, k: &str, r: &InstanceRecord, e: u64) -> Result<(), StoreError> {
            self.0.save(k, r, e).await
        }
        async fn delete(
            &self,
            k: &str,
            e: Option<u64>,
            f: Option<&Fence>,
        ) -> Result<bool, StoreError> {
            self.0.delete(k, e, f).await
        }
        async fn list_keys(
            &self,
            p: &str,
            a: Option<&str>,
            l: usize,
        ) -> Result<Vec<String>, StoreError> {
            self.0.list_keys(p, a, l).await
        }
        async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError> {
            self.0.audit(key).await
        }
        async fn save_machine(
            &self,
            w: &str,
            v: &str,
            d: &serde_json::Value,
        ) -> Result<(), StoreError> {
            self.0.save_machine(w, v, d).await
        }
        async fn load_machine(
            &self,
            w: &str,
            v: &str,
        ) -> Result<Option<serde_json::Value>, StoreError> {
            self.0.load_machine(w, v).await
        }
        async fn ping(&self) -> Result<(), StoreError> {
            Ok(())
        }
        async fn delete_leaving(
            &self,
            k: &str,
            e: u64,
            f: Option<&Fence>,
            t: &Tombstone,
        ) -> Result<bool, StoreError> {
            self.0.delete_leaving(k, e, f, t).await
        }
        async fn tombstones(&self, p: &str, l: usize) -> Result<Vec<Tombstone>, StoreError> {
            self.0.tombstones(p, l).await
        }
        async fn prune_tombstones(&self, u: u64, l: usize) -> Result<usize, StoreError> {
            self.0.prune_tombstones(u, l).await
        }
    }

    #[test]
    fn a_shared_store_without_leases_is_refused_naming_what_it_lacks() {
        let store: Arc<dyn StateStore> = Arc::new(SharedWithoutLeases(MemoryStore::new()));
        let Err(StoreError::Config(message)) = refuse_shared_without_leases(store) else {
            panic!("a shared store without leases was accepted");
        };
        assert!(
            message.contains("unleased:") && message.contains("keeps_leases"),
            "{message}"
        );
        let leased: Arc<dyn StateStore> = Arc::new(MemoryStore::shared());
        assert!(refuse_shared_without_leases(leased).is_ok());
    }

    /// The defaults a store gets for what it leaves out answer as the indexed stores do.
    #[tokio::test]
    async fn the_defaults_count_and_find_due_records_by_scanning() {
        let store = SharedWithoutLeases(MemoryStore::new());
        assert!(!store.indexes_due_times());
        for (key, due) in [
            ("handle/b@alice", Some(30)),
            ("handle/a@alice", Some(10)),
            ("handle/c@bob", None),
            ("x", Some(10)),
        ] {
            let record = InstanceRecord {
                due_at_ms: due,
                ..InstanceRecord::first("w", serde_json::json!({"value": "a"}))
            };
            store.save(key, &record, 0).await.unwrap();
        }
        assert_eq!(store.count("").await.unwrap(), 4);
        assert_eq!(store.count("handle/").await.unwrap(), 3);
        assert_eq!(store.count_owned("alice").await.unwrap(), 2);
        let due: Vec<_> = store
            .due(20, None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.key)
            .collect();
        assert_eq!(due, ["handle/a@alice", "x"]);
        let first = store.due(100, None, 1).await.unwrap();
        let rest: Vec<_> = store
            .due(100, first.first(), 10)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.key)
            .collect();
        assert_eq!(rest, ["x", "handle/b@alice"]);
    }

    #[test]
    fn a_registered_scheme_takes_its_urls_only() {
        let mut stores = Stores::default();
        stores.register("mysql", |_, _| async { Ok(MemoryStore::new()) });
        assert!(stores.opener_for("mysql://root@127.0.0.1/test").is_some());
        assert!(stores.opener_for("mysql:x").is_some());
        assert!(stores.opener_for("mysqlx://h").is_none());
        assert!(stores.opener_for("nats://h").is_none());
        assert_eq!(stores.names().collect::<Vec<_>>(), ["mysql"]);
    }

    /// A program's own store is handed back as it is, for any URL of its scheme.
    #[tokio::test]
    async fn an_opened_store_is_the_one_every_url_of_its_scheme_opens() {
        let mine: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut stores = Stores::default();
        stores.register_opened("app", mine.clone());
        for url in ["app:", "app://anything"] {
            let open = stores.opener_for(url).expect("the scheme is registered");
            let opened = open(url.to_owned(), StoreOptions::default()).await.unwrap();
            assert!(Arc::ptr_eq(&opened, &mine), "{url}");
        }
    }

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

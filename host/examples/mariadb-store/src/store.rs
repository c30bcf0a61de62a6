//! [`MariaDbStore`]: the store itself, how it opens, and its `StateStore` implementation, each
//! method handing over to the module that owns that part of the contract.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use turnstile::store::{
    AuditEntry, ChangeFeed, Due, Durability, Fence, InstanceRecord, LeaseGrant, LeaseRenewal,
    StateStore, StoreError, StoreOptions, Tombstone,
};

use crate::{changes::Pruned, link::Link, schema::Tables};

/// Workflow instances in a MariaDB or MySQL database, shared by every server opening the same
/// URL and namespace. See the crate documentation for what it promises and costs.
pub struct MariaDbStore {
    pub(crate) link: Arc<Link>,
    pub(crate) tables: Tables,
    /// The audit entries kept per instance.
    pub(crate) audit_keep: u64,
    pub(crate) pruned: Pruned,
}

impl MariaDbStore {
    /// Opens the store at `url` (`mysql://user:password@host:3306/database`, or `mariadb://`),
    /// creating the namespace's tables if they are missing. [`StoreError::Config`] for a URL or
    /// namespace that cannot work, [`StoreError::Unavailable`] for a server that does not
    /// answer (named by its URL, without the password).
    ///
    /// Takes its arguments by value so that it can be registered as it is
    /// (`stores.register("mysql", MariaDbStore::open)`).
    pub async fn open(url: String, options: StoreOptions) -> Result<MariaDbStore, StoreError> {
        let tables = Tables::of(&options)?;
        let link = Link::new(&url, &options)?;
        tables
            .create_missing(&link)
            .await
            .map_err(|error| match error {
                StoreError::NoAnswer(reason) | StoreError::Dropped(reason) => {
                    StoreError::Unavailable(reason)
                }
                other => other,
            })?;
        Ok(MariaDbStore {
            link: Arc::new(link),
            tables,
            audit_keep: options.audit_keep,
            pruned: Pruned::default(),
        })
    }

    /// Drops every table of `options.namespace` at `url`, and everything in them, without
    /// creating any first: for tests, and for an operator retiring a namespace.
    pub async fn drop_namespace(url: &str, options: &StoreOptions) -> Result<(), StoreError> {
        let tables = Tables::of(options)?;
        let link = Link::new(url, options)?;
        tables.drop_all(&link).await
    }
}

#[async_trait]
impl StateStore for MariaDbStore {
    fn describe(&self) -> String {
        format!(
            "{} (namespace tables {}_*)",
            self.link.name(),
            self.namespace()
        )
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn keeps_leases(&self) -> bool {
        true
    }

    /// `due_at` has an index on `(due_at, k)` (`records.rs`).
    fn indexes_due_times(&self) -> bool {
        true
    }

    async fn announce_change(&self, origin: &str, key: &str) -> Result<(), StoreError> {
        self.announce(origin, key).await
    }

    async fn watch_changes(&self) -> Option<Result<ChangeFeed, StoreError>> {
        Some(self.feed().await)
    }

    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
        self.load_record(key).await
    }

    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError> {
        self.save_record(key, record, expected).await
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        self.delete_record(key, expected, fence, None).await
    }

    async fn acquire_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        self.acquire(key, holder, ttl).await
    }

    async fn renew_lease(
        &self,
        key: &str,
        fence: &Fence,
        ttl: Duration,
    ) -> Result<LeaseRenewal, StoreError> {
        self.renew(key, fence, ttl).await
    }

    async fn release_lease(&self, key: &str, fence: &Fence) -> Result<(), StoreError> {
        self.release(key, fence).await
    }

    async fn list_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        self.list(prefix, after, limit).await
    }

    async fn count(&self, prefix: &str) -> Result<u64, StoreError> {
        self.count_prefix(prefix).await
    }

    async fn count_owned(&self, owner: &str) -> Result<u64, StoreError> {
        self.count_owner(owner).await
    }

    async fn list_owned(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        self.owned(owner, after, limit).await
    }

    async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError> {
        self.audit_of(key).await
    }

    async fn due(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        self.due_page(until, after, limit).await
    }

    async fn save_machine(
        &self,
        workflow: &str,
        version: &str,
        definition: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.keep_machine(workflow, version, definition).await
    }

    async fn load_machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        self.machine(workflow, version).await
    }

    async fn load_mark(&self, name: &str) -> Result<Option<u64>, StoreError> {
        self.mark(name).await
    }

    async fn save_mark(&self, name: &str, value: u64) -> Result<(), StoreError> {
        self.set_mark(name, value).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let what = "ping";
        let mut conn = self.link.conn(what).await?;
        self.link.read(what, conn.ping()).await
    }

    /// What InnoDB's `innodb_flush_log_at_trx_commit` makes of a commit: at 1 or 2 the log is
    /// written at each commit, so a restart of the server keeps it (at 2 an operating-system
    /// crash may lose the last second); at 0 a restart may lose the last second.
    async fn durability(&self) -> Option<Durability> {
        let what = "read durability";
        let mut conn = self.link.conn(what).await.ok()?;
        let flush: Option<u64> = self
            .link
            .read(
                what,
                conn.query_first("SELECT @@innodb_flush_log_at_trx_commit"),
            )
            .await
            .ok()?;
        Some(match flush? {
            1 => Durability::Kept("InnoDB flushes its log to disk at every commit".to_owned()),
            2 => Durability::Kept(
                "InnoDB writes its log at every commit and flushes it once a second: a crash \
                 of the machine may lose the last second"
                    .to_owned(),
            ),
            other => Durability::Lost(format!(
                "innodb_flush_log_at_trx_commit is {other}: a restart of the server may lose \
                 the last second of commits"
            )),
        })
    }

    async fn delete_leaving(
        &self,
        key: &str,
        expected: u64,
        fence: Option<&Fence>,
        tombstone: &Tombstone,
    ) -> Result<bool, StoreError> {
        self.delete_record(key, Some(expected), fence, Some(tombstone))
            .await
    }

    async fn tombstones(&self, prefix: &str, limit: usize) -> Result<Vec<Tombstone>, StoreError> {
        self.tombstones_of(prefix, limit).await
    }

    async fn prune_tombstones(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError> {
        self.prune(until_ms, limit).await
    }
}

impl MariaDbStore {
    /// The namespace the tables are named by.
    fn namespace(&self) -> &str {
        self.tables
            .instances
            .strip_suffix("_instances")
            .unwrap_or(&self.tables.instances)
    }
}

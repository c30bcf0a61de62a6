//! [`NatsKvStore`]: the connection, the bucket, and the contract's operations as reads and
//! compare-and-set writes of one key's entry (`entry.rs`).
//!
//! Every change goes through [`NatsKvStore::change`]: read the entry and its revision, decide
//! on what was read, write back only if the revision is still that one, and decide again on a
//! fresh read when it is not. The revision moves with any change to the entry (a lease renewed,
//! a wanted mark), so a lost race is not a conflict by itself: the next read says whether the
//! record's version moved, and only then is the writer told [`StoreError::Conflict`].

use std::{future::Future, time::Duration};

use async_nats::jetstream::{
    self,
    consumer::{DeliverPolicy, ReplayPolicy, push::OrderedConfig},
    kv::{self, Operation, UpdateErrorKind},
};
use async_trait::async_trait;
use futures_util::StreamExt;
use turnstile::store::{
    AuditEntry, ChangeFeed, Durability, Fence, InstanceRecord, LeaseGrant, LeaseRenewal,
    StateStore, StoreError, StoreOptions, Tombstone, check_save, now_ms,
};

use crate::{
    address::Address,
    entry::{Entry, kv_key, store_key},
    feed, lease,
};

/// KV key prefixes: records (with their trail, lease and tombstone), machines, marks.
const RECORDS: &str = "r.";
const MACHINES: &str = "m.";
const MARKS: &str = "k.";

/// A Turnstile state store in one NATS JetStream key-value bucket (see the crate docs).
pub struct NatsKvStore {
    client: async_nats::Client,
    kv: kv::Store,
    /// The server and bucket, without a password: for `describe` and every error.
    shown: String,
    /// Subjects of the change announcements: this prefix and the hex key.
    changes: String,
    op_timeout: Duration,
    audit_keep: u64,
    /// Counts the connection's drops, so a change feed ends on one (see `feed.rs`).
    drops: tokio::sync::watch::Receiver<u64>,
}

impl NatsKvStore {
    /// Connects to the NATS server at `url` (`nats://[user:password@]host:port[?bucket=name]`)
    /// and opens the bucket (`options.namespace` unless the URL names one), creating it if it
    /// is missing.
    pub async fn open(url: String, options: StoreOptions) -> Result<Self, StoreError> {
        let Address {
            server,
            bucket,
            shown,
        } = Address::parse(&url, &options.namespace)?;
        let (drop_count, drops) = tokio::sync::watch::channel(0u64);
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(options.connect_timeout)
            .event_callback(move |event| {
                let drop_count = drop_count.clone();
                async move {
                    if matches!(event, async_nats::Event::Disconnected) {
                        drop_count.send_modify(|n| *n += 1);
                    }
                }
            })
            .connect(server)
            .await
            .map_err(|e| StoreError::Unavailable(format!("{shown}: cannot connect: {e}")))?;
        let js = jetstream::ContextBuilder::new()
            .timeout(options.op_timeout)
            .build(client.clone());
        // The bucket's stream as a KV bucket wants it, made here rather than by the client's
        // `create_key_value`, which first asks for account details in a shape 2.9 does not send.
        let stream = jetstream::stream::Config {
            name: format!("KV_{bucket}"),
            description: Some("Turnstile workflow instances".to_owned()),
            subjects: vec![format!("$KV.{bucket}.>")],
            // One value per key: a record's history is its audit trail, not the stream's.
            max_messages_per_subject: 1,
            storage: jetstream::stream::StorageType::File,
            discard: jetstream::stream::DiscardPolicy::New,
            allow_direct: true,
            allow_rollup: true,
            deny_delete: true,
            ..Default::default()
        };
        let cannot_open = |e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!("{shown}: cannot open the bucket: {e}"))
        };
        js.get_or_create_stream(stream)
            .await
            .map_err(|e| cannot_open(&e))?;
        let kv = js
            .get_key_value(&bucket)
            .await
            .map_err(|e| cannot_open(&e))?;
        Ok(Self {
            client,
            kv,
            changes: format!("turnstile.{bucket}.changed."),
            shown,
            op_timeout: options.op_timeout,
            audit_keep: options.audit_keep,
            drops,
        })
    }

    /// Deletes the bucket and everything in it (tests, and operators retiring a namespace).
    pub async fn destroy(&self) -> Result<(), StoreError> {
        let js = jetstream::new(self.client.clone());
        self.within(js.delete_key_value(&self.kv.name))
            .await?
            .map_err(|e| self.unavailable("delete the bucket", e))?;
        Ok(())
    }

    fn unavailable(&self, what: &str, error: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable(format!("{}: {what}: {error}", self.shown))
    }

    /// `future`, bounded by the operation timeout.
    async fn within<T>(&self, future: impl Future<Output = T>) -> Result<T, StoreError> {
        tokio::time::timeout(self.op_timeout, future)
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "{}: no answer within {:?}",
                    self.shown, self.op_timeout
                ))
            })
    }

    /// The entry under `key` and its revision (0: the key never held a value).
    async fn read(&self, key: &str) -> Result<(u64, Entry), StoreError> {
        let found = self
            .within(self.kv.entry(kv_key(RECORDS, key)))
            .await?
            .map_err(|e| self.unavailable("read", e))?;
        match found {
            None => Ok((0, Entry::default())),
            Some(e) if e.operation != Operation::Put => Ok((e.revision, Entry::default())),
            Some(e) => Ok((e.revision, Entry::decode(key, &e.value)?)),
        }
    }

    /// Writes `entry` under `key` if its revision is still `revision`; `false` if it moved.
    /// An entry left empty is deleted, so a key with nothing in it lists nowhere.
    async fn write(&self, key: &str, revision: u64, entry: &Entry) -> Result<bool, StoreError> {
        let kv_key = kv_key(RECORDS, key);
        let sent = if entry.is_empty() {
            if revision == 0 {
                return Ok(true);
            }
            let delete = self.kv.delete_expect_revision(&kv_key, Some(revision));
            tokio::time::timeout(self.op_timeout, delete).await
        } else {
            let update = self.kv.update(&kv_key, entry.encode().into(), revision);
            tokio::time::timeout(self.op_timeout, update)
                .await
                .map(|sent| sent.map(drop))
        };
        match sent {
            Ok(Ok(())) => Ok(true),
            Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(false),
            // Sent and not answered: it may have been applied.
            Ok(Err(e)) if e.kind() == UpdateErrorKind::TimedOut => Err(StoreError::NoAnswer(
                format!("{}: the write of {key:?} got no answer", self.shown),
            )),
            Ok(Err(e)) => Err(self.unavailable("write", e)),
            Err(_) => Err(StoreError::NoAnswer(format!(
                "{}: the write of {key:?} got no answer within {:?}",
                self.shown, self.op_timeout
            ))),
        }
    }

    /// Reads `key`'s entry, lets `decide` change it (it says whether it did), and writes it back
    /// by compare-and-set, deciding again on a fresh read as long as the revision moves.
    async fn change<T>(
        &self,
        key: &str,
        mut decide: impl FnMut(&mut Entry) -> Result<(T, bool), StoreError>,
    ) -> Result<T, StoreError> {
        loop {
            let (revision, mut entry) = self.read(key).await?;
            let (answer, changed) = decide(&mut entry)?;
            if !changed || self.write(key, revision, &entry).await? {
                return Ok(answer);
            }
        }
    }

    /// The current entry of every key under `prefix`, as (KV key after the prefix, entry): one
    /// ordered consumer delivering the last value of each key. A scan of the whole bucket.
    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Entry)>, StoreError> {
        let consumer = self
            .within(self.kv.stream.create_consumer(OrderedConfig {
                deliver_subject: self.client.new_inbox(),
                filter_subject: format!("{}{prefix}>", self.kv.prefix),
                deliver_policy: DeliverPolicy::LastPerSubject,
                replay_policy: ReplayPolicy::Instant,
                ..Default::default()
            }))
            .await?
            .map_err(|e| self.unavailable("scan", e))?;
        let mut found = Vec::new();
        if consumer.cached_info().num_pending == 0 {
            return Ok(found);
        }
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| self.unavailable("scan", e))?;
        let subject_prefix = format!("{}{prefix}", self.kv.prefix);
        loop {
            let message = match self.within(messages.next()).await? {
                Some(Ok(message)) => message,
                Some(Err(e)) => return Err(self.unavailable("scan", e)),
                None => return Err(self.unavailable("scan", "the consumer ended")),
            };
            let pending = message
                .info()
                .map_err(|e| self.unavailable("scan", e))?
                .pending;
            let deleted = message
                .headers
                .as_ref()
                .and_then(|headers| headers.get("KV-Operation"))
                .is_some_and(|op| op.as_str() != "PUT");
            if let Some(hex) = message.subject.strip_prefix(&subject_prefix)
                && let Some(key) = store_key(hex)
                && !deleted
            {
                let entry = Entry::decode(&key, &message.payload)?;
                found.push((key, entry));
            }
            if pending == 0 {
                return Ok(found);
            }
        }
    }

    /// A small value (a machine, a mark) under `kv_key`.
    async fn get(&self, kv_key: String) -> Result<Option<Vec<u8>>, StoreError> {
        let value = self
            .within(self.kv.get(kv_key))
            .await?
            .map_err(|e| self.unavailable("read", e))?;
        Ok(value.map(|bytes| bytes.to_vec()))
    }
}

fn conflict(key: &str, expected: u64, current: Option<u64>) -> StoreError {
    StoreError::Conflict {
        key: key.to_owned(),
        expected,
        current,
    }
}

#[async_trait]
impl StateStore for NatsKvStore {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn keeps_leases(&self) -> bool {
        true
    }

    async fn announce_change(&self, origin: &str, key: &str) -> Result<(), StoreError> {
        let subject = kv_key(&self.changes, key);
        self.within(self.client.publish(subject, origin.to_owned().into()))
            .await?
            .map_err(|e| self.unavailable("announce a change", e))
    }

    async fn watch_changes(&self) -> Option<Result<ChangeFeed, StoreError>> {
        Some(Ok(feed::open(
            self.client.clone(),
            self.shown.clone(),
            self.changes.clone(),
            self.drops.clone(),
        )))
    }

    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
        self.read(key).await?.1.record(key)
    }

    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError> {
        check_save(key, record, expected)?;
        self.change(key, |entry| {
            lease::check_fence(key, entry.lease.as_ref(), record.fence.as_ref(), now_ms())?;
            let current = entry.version();
            if current.unwrap_or(0) != expected {
                return Err(conflict(key, expected, current));
            }
            entry.put_record(key, record, self.audit_keep)?;
            Ok(((), true))
        })
        .await
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        self.change(key, |entry| {
            lease::check_fence(key, entry.lease.as_ref(), fence, now_ms())?;
            let current = entry.version();
            if let Some(expected) = expected
                && current != Some(expected)
            {
                return Err(conflict(key, expected, current));
            }
            entry.remove_record();
            Ok((current.is_some(), current.is_some()))
        })
        .await
    }

    async fn delete_leaving(
        &self,
        key: &str,
        expected: u64,
        fence: Option<&Fence>,
        tombstone: &Tombstone,
    ) -> Result<bool, StoreError> {
        self.change(key, |entry| {
            lease::check_fence(key, entry.lease.as_ref(), fence, now_ms())?;
            let current = entry.version();
            if current != Some(expected) {
                return Err(conflict(key, expected, current));
            }
            entry.remove_record();
            entry.tombstone = Some(tombstone.clone());
            Ok((true, true))
        })
        .await
    }

    async fn acquire_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        self.change(key, |entry| match entry.version() {
            None => Ok((LeaseGrant::Absent, false)),
            Some(version) => Ok(lease::acquire(
                &mut entry.lease,
                holder,
                ttl,
                version,
                now_ms(),
            )),
        })
        .await
    }

    async fn renew_lease(
        &self,
        key: &str,
        fence: &Fence,
        ttl: Duration,
    ) -> Result<LeaseRenewal, StoreError> {
        self.change(key, |entry| {
            let renewal = lease::renew(&mut entry.lease, fence, ttl, now_ms());
            Ok((renewal, renewal != LeaseRenewal::Lost))
        })
        .await
    }

    async fn release_lease(&self, key: &str, fence: &Fence) -> Result<(), StoreError> {
        self.change(key, |entry| {
            Ok(((), lease::release(&mut entry.lease, fence, now_ms())))
        })
        .await
    }

    async fn list_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let mut keys: Vec<String> = self
            .scan(RECORDS)
            .await?
            .into_iter()
            .filter(|(key, entry)| {
                entry.record.is_some()
                    && key.starts_with(prefix)
                    && after.is_none_or(|after| key.as_str() > after)
            })
            .map(|(key, _)| key)
            .collect();
        keys.sort_unstable();
        keys.truncate(limit);
        Ok(keys)
    }

    async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.read(key).await?.1.audit)
    }

    async fn save_machine(
        &self,
        workflow: &str,
        version: &str,
        definition: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let kv_key = kv_key(MACHINES, &format!("{workflow}@{version}"));
        let created = self
            .within(self.kv.create(kv_key, definition.to_string().into()))
            .await?;
        match created {
            // A version names one definition forever: the first one saved stays.
            Ok(_) => Ok(()),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(self.unavailable("save a machine", e)),
        }
    }

    async fn load_machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let name = format!("{workflow}@{version}");
        let Some(bytes) = self.get(kv_key(MACHINES, &name)).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                key: name,
                reason: format!("machine is not JSON: {e}"),
            })
    }

    async fn load_mark(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let Some(bytes) = self.get(kv_key(MARKS, name)).await? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&bytes);
        text.parse().map(Some).map_err(|_| StoreError::Corrupt {
            key: name.to_owned(),
            reason: format!("mark is not a number: {text:?}"),
        })
    }

    async fn save_mark(&self, name: &str, value: u64) -> Result<(), StoreError> {
        self.within(self.kv.put(kv_key(MARKS, name), value.to_string().into()))
            .await?
            .map_err(|e| self.unavailable("save a mark", e))?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // One JetStream round trip: a read of a key nobody writes.
        self.get(kv_key(MARKS, "ping")).await.map(drop)
    }

    async fn durability(&self) -> Option<Durability> {
        let config = &self.kv.stream.cached_info().config;
        let replicas = config.num_replicas.max(1);
        Some(match config.storage {
            jetstream::stream::StorageType::File => Durability::Kept(format!(
                "JetStream file storage, {replicas} replica(s): a server restart keeps \
                 acknowledged saves (synced to disk as the server's sync_interval says)"
            )),
            jetstream::stream::StorageType::Memory => Durability::Lost(
                "JetStream memory storage: a server restart loses every instance".to_owned(),
            ),
        })
    }

    async fn tombstones(&self, prefix: &str, limit: usize) -> Result<Vec<Tombstone>, StoreError> {
        let mut found: Vec<Tombstone> = self
            .scan(RECORDS)
            .await?
            .into_iter()
            .filter(|(key, entry)| entry.record.is_none() && key.starts_with(prefix))
            .filter_map(|(_, entry)| entry.tombstone)
            .collect();
        found.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        found.truncate(limit);
        Ok(found)
    }

    async fn prune_tombstones(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let mut expired: Vec<(u64, String)> = self
            .scan(RECORDS)
            .await?
            .into_iter()
            .filter_map(|(key, entry)| Some((entry.tombstone?.deleted_at_ms, key)))
            .filter(|(at, _)| *at <= until_ms)
            .collect();
        expired.sort_unstable();
        expired.truncate(limit);
        let mut pruned = 0;
        for (_, key) in expired {
            // Pruned only if a delete since did not leave a newer one.
            let removed = self
                .change(&key, |entry| {
                    let old = entry
                        .tombstone
                        .as_ref()
                        .is_some_and(|t| t.deleted_at_ms <= until_ms);
                    if old {
                        entry.tombstone = None;
                    }
                    Ok((old, old))
                })
                .await?;
            pruned += usize::from(removed);
        }
        Ok(pruned)
    }
}

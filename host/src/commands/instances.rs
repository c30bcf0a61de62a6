//! `turnstile instances`: what an operator needs to see and fix workflow instances in a store,
//! without a client and without the plugins: list them (by workflow, state, age), show one with
//! its audit trail (`store/audit.rs`), reset one to its machine's initial state (which the trail
//! records as `operator:reset`), delete one (its trail with it).
//!
//! It opens the store the way `serve` does. Every write is a compare-and-set on the version it
//! read, so an instance a server moves meanwhile is left alone (the command says so and changes
//! nothing), and every write is announced on the store's change channel, so servers sharing a
//! Redis or PostgreSQL store drop their in-memory copy and read the new state on the next call.
//! The embedded store is one process's file: stop the server first (the command says so when the
//! file is in use).
//!
//! Everything here reads stored records as they are: the persisted snapshot carries its state
//! value, status and context, so listing needs no machine; a reset takes the machine version
//! the record names from the store (`StateStore::load_machine`).

use std::{
    io::Write,
    path::PathBuf,
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::{
    statechart::Machine,
    store::{
        self, AuditEntry, Fence, InstanceRecord, LeaseGrant, StateStore, StoreError, StoreOptions,
        now_ms,
    },
};

/// `turnstile instances …`: the store to open, as `serve` names it, and what to do.
#[derive(clap::Args, Debug)]
pub struct InstancesArgs {
    /// The store: `embedded:PATH`, `redis://…`, `postgres://…` (default: the embedded store in
    /// the data directory, as `serve` uses it).
    #[arg(long, env = "TURNSTILE_STORE")]
    pub store: Option<String>,
    /// The deployment's namespace in a shared store (as given to `serve`).
    #[arg(long, env = "TURNSTILE_STORE_NAMESPACE", default_value = "turnstile")]
    pub store_namespace: String,
    /// The data directory of the default embedded store (as given to `serve`).
    #[arg(long, env = "TURNSTILE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Print JSON, one object per line, instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub command: InstancesCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum InstancesCommand {
    /// Lists instances: key, workflow, state, status, version, last save.
    List {
        #[arg(long)]
        workflow: Option<String>,
        /// A state path active in the instance (`review`, or `parent.child`).
        #[arg(long)]
        state: Option<String>,
        /// Only instances whose last save is at least SECS old.
        #[arg(long, value_name = "SECS")]
        older_than: Option<u64>,
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Shows one instance (a handle, or a store key from `list`): state, context, timers, and
    /// its audit trail (each transition: when, by which tool or timer, from, to, principal; the
    /// store keeps the last `--audit-keep` of them).
    Show {
        instance: String,
        /// Only the last N entries of the audit trail (`audit_total` says how many there are).
        #[arg(long, value_name = "N")]
        last: Option<usize>,
    },
    /// Puts an instance back in its machine's initial state and context.
    Reset { instance: String },
    /// Deletes an instance; its handle then answers UNKNOWN_HANDLE.
    Delete { instance: String },
}

/// Opens the store `args` names and runs the command, printing to stdout.
pub fn run_cli(args: InstancesArgs) -> anyhow::Result<ExitCode> {
    let url = match args.store {
        Some(url) => url,
        None => super::serve::default_store(&super::serve::data_dir(args.data_dir)),
    };
    if url.starts_with("memory:") {
        bail!("the memory store lives inside one server process: there is nothing to open");
    }
    // Opening an embedded store creates it: a mistyped path would show an empty store.
    if let Some(path) = url.strip_prefix("embedded:")
        && !std::path::Path::new(path).exists()
    {
        bail!("there is no embedded store at {path} (give --data-dir or --store as to serve)");
    }
    let action = match args.command {
        InstancesCommand::List {
            workflow,
            state,
            older_than,
            limit,
        } => Action::List(Filter {
            workflow,
            state,
            older_than_secs: older_than,
            limit,
        }),
        InstancesCommand::Show { instance, last } => Action::Show { instance, last },
        InstancesCommand::Reset { instance } => Action::Reset { instance },
        InstancesCommand::Delete { instance } => Action::Delete { instance },
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let options = StoreOptions {
            namespace: args.store_namespace,
            ..StoreOptions::default()
        };
        let store = store::open(&url, &options).await.map_err(|error| {
            if url.starts_with("embedded:") {
                anyhow::anyhow!(
                    "cannot open {url}: {error}. The embedded store is one process's file: if a \
                     server is running on it, stop it first"
                )
            } else {
                anyhow::anyhow!("cannot open the store: {error}")
            }
        })?;
        run(&*store, action, args.json, &mut std::io::stdout().lock()).await
    })
}

/// How many keys one page of a listing reads from the store.
const PAGE: usize = 500;

/// The name this command's writes are announced under, on a store's change channel.
const ANNOUNCER: &str = "turnstile-instances";

/// What to do.
#[derive(Debug, Clone)]
pub enum Action {
    List(Filter),
    Show {
        instance: String,
        /// Only the last this many audit entries.
        last: Option<usize>,
    },
    Reset {
        instance: String,
    },
    Delete {
        instance: String,
    },
}

/// Which instances `list` prints.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only instances of this workflow.
    pub workflow: Option<String>,
    /// Only instances in this state: a state path (`review`, or `a.b` for a nested one), active
    /// in the instance's state value.
    pub state: Option<String>,
    /// Only instances whose last save is at least this many seconds old.
    pub older_than_secs: Option<u64>,
    /// At most this many.
    pub limit: usize,
}

/// Runs `action` against `store`, writing what it finds to `out` (one JSON object per line with
/// `json`, else text for a person).
pub async fn run(
    store: &dyn StateStore,
    action: Action,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    match action {
        Action::List(filter) => list(store, &filter, json, out).await?,
        Action::Show { instance, last } => {
            let (key, record) = find(store, &instance).await?;
            let mut shown = describe(&key, &record);
            let mut audit = store.audit(&key).await?;
            shown["audit_total"] = audit.len().into();
            if let Some(last) = last {
                audit.drain(..audit.len().saturating_sub(last));
            }
            shown["audit"] = serde_json::to_value(audit)?;
            if json {
                writeln!(out, "{shown}")?;
            } else {
                writeln!(out, "{}", serde_json::to_string_pretty(&shown)?)?;
            }
        }
        Action::Reset { instance } => {
            let (key, _) = find(store, &instance).await?;
            let fence = operator_lease(store, &key).await?;
            let reset = match reread(store, &key).await {
                Ok(record) => reset(store, &key, &record, fence.as_ref()).await,
                Err(error) => Err(error),
            };
            release(store, &key, fence.as_ref()).await;
            report(out, json, "reset", &key, Some(&reset?))?;
        }
        Action::Delete { instance } => {
            let (key, _) = find(store, &instance).await?;
            let fence = operator_lease(store, &key).await?;
            let deleted = match reread(store, &key).await {
                Ok(record) => store
                    .delete(&key, Some(record.version), fence.as_ref())
                    .await
                    .map_err(anyhow::Error::from),
                Err(error) => Err(error),
            };
            // A delete removes the lease with the record; only a failed one leaves it to release.
            if !matches!(deleted, Ok(true)) {
                release(store, &key, fence.as_ref()).await;
            }
            if !deleted? {
                bail!(changed_meanwhile(&key));
            }
            announce(store, &key).await;
            report(out, json, "deleted", &key, None)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(
    store: &dyn StateStore,
    filter: &Filter,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let cutoff = filter
        .older_than_secs
        .map(|secs| now_ms().saturating_sub(secs.saturating_mul(1000)));
    if !json {
        writeln!(
            out,
            "{:<60} {:<14} {:<24} {:<8} {:>8}  UPDATED",
            "KEY", "WORKFLOW", "STATE", "STATUS", "VERSION"
        )?;
    }
    let mut shown = 0;
    let mut after: Option<String> = None;
    'pages: loop {
        let keys = store.list_keys("", after.as_deref(), PAGE).await?;
        let Some(last) = keys.last().cloned() else {
            break;
        };
        for key in keys {
            if shown >= filter.limit {
                break 'pages;
            }
            // Machine definitions share the key space; they are not instances.
            let Some(record) = load_instance(store, &key).await? else {
                continue;
            };
            let value = &record.snapshot["value"];
            let keep = filter
                .workflow
                .as_ref()
                .is_none_or(|w| *w == record.workflow)
                && filter
                    .state
                    .as_ref()
                    .is_none_or(|state| active_paths(value).contains(state))
                && cutoff.is_none_or(|cutoff| record.updated_at_ms <= cutoff);
            if !keep {
                continue;
            }
            shown += 1;
            if json {
                writeln!(out, "{}", summary(&key, &record))?;
            } else {
                writeln!(
                    out,
                    "{:<60} {:<14} {:<24} {:<8} {:>8}  {}",
                    key,
                    record.workflow,
                    state_text(value),
                    record.snapshot["status"].as_str().unwrap_or("?"),
                    record.version,
                    age(record.updated_at_ms)
                )?;
            }
        }
        after = Some(last);
    }
    if !json {
        writeln!(out, "{shown} instance(s)")?;
    }
    Ok(())
}

/// The record under `key`, if it is an instance's (a record that does not parse is reported,
/// not skipped: an operator looking for trouble wants to see it).
async fn load_instance(
    store: &dyn StateStore,
    key: &str,
) -> anyhow::Result<Option<InstanceRecord>> {
    if !(key.starts_with("handle/") || key.starts_with(crate::actors::SESSION_PREFIX)) {
        return Ok(None);
    }
    match store.load(key).await {
        Ok(record) => Ok(record),
        Err(StoreError::Unavailable(reason) | StoreError::NoAnswer(reason)) => {
            bail!("the store is unavailable: {reason}")
        }
        Err(error) => {
            tracing::warn!(%key, %error, "cannot read this record; skipped");
            Ok(None)
        }
    }
}

/// The key and record `instance` names: a store key (`handle/…`, `session/…`), or a handle,
/// whose key may carry a tenant (`handle/<handle>@<tenant>`).
/// How long `reset` and `delete` wait for a server to give up the instance's lease.
const OPERATOR_LEASE_WAIT: Duration = Duration::from_secs(10);
/// How long the command's own lease lives: well past what a reset or delete takes.
const OPERATOR_LEASE_TTL: Duration = Duration::from_secs(30);

/// In a store servers share, takes the instance's lease for an operator's write (see
/// `store/lease.rs`), so that no server runs a call on the instance while it is reset or
/// deleted, and no call that ran before can commit after: waits for the server holding it to
/// give it up (it does once the instance is idle), up to [`OPERATOR_LEASE_WAIT`]. `None` for
/// a store no server shares, or an instance that is gone.
async fn operator_lease(store: &dyn StateStore, key: &str) -> anyhow::Result<Option<Fence>> {
    if !store.is_shared() {
        return Ok(None);
    }
    let holder: Arc<str> = format!("operator-{}", std::process::id()).into();
    let deadline = Instant::now() + OPERATOR_LEASE_WAIT;
    loop {
        match store
            .acquire_lease(key, &holder, OPERATOR_LEASE_TTL)
            .await?
        {
            LeaseGrant::Held { token, .. } => return Ok(Some(Fence { token, holder })),
            LeaseGrant::Absent => return Ok(None),
            LeaseGrant::Busy { remaining_ms } => {
                if Instant::now() >= deadline {
                    bail!(
                        "{key} is busy: a server has been running calls on it for {}s; nothing \
                         was done: run the command again",
                        OPERATOR_LEASE_WAIT.as_secs()
                    );
                }
                let pause = Duration::from_millis(remaining_ms.clamp(1, 100));
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Gives the operator's lease back (best effort: it lapses by itself).
async fn release(store: &dyn StateStore, key: &str, fence: Option<&Fence>) {
    if let Some(fence) = fence
        && let Err(error) = store.release_lease(key, fence).await
    {
        tracing::debug!(%key, %error, "could not release the operator's lease; it lapses by itself");
    }
}

/// The record under `key`, read again once the lease is held.
async fn reread(store: &dyn StateStore, key: &str) -> anyhow::Result<InstanceRecord> {
    store
        .load(key)
        .await?
        .with_context(|| format!("{key} was deleted while this command ran; nothing was done"))
}

async fn find(store: &dyn StateStore, instance: &str) -> anyhow::Result<(String, InstanceRecord)> {
    let keys: Vec<String> = if instance.contains('/') {
        vec![instance.to_string()]
    } else {
        let prefix = format!("handle/{instance}");
        store
            .list_keys(&prefix, None, PAGE)
            .await?
            .into_iter()
            .filter(|key| key == &prefix || key.starts_with(&format!("{prefix}@")))
            .collect()
    };
    let mut found = Vec::new();
    for key in keys {
        if let Some(record) = store.load(&key).await? {
            found.push((key, record));
        }
    }
    match found.len() {
        0 => bail!("no instance {instance} in this store"),
        1 => Ok(found.remove(0)),
        _ => bail!(
            "{instance} names {} instances (one per principal): name one by its key: {}",
            found.len(),
            found
                .iter()
                .map(|(key, _)| key.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Puts the instance under `key` back in its machine's initial state, with the machine's
/// initial context, forgetting its idempotency entries (a retry must not replay a result from
/// before the reset). Returns the new state value.
async fn reset(
    store: &dyn StateStore,
    key: &str,
    record: &InstanceRecord,
    fence: Option<&Fence>,
) -> anyhow::Result<Value> {
    let Some(version) = &record.machine else {
        bail!(
            "{key} does not name its machine version (a record from before format 2): start a \
             server on this store once, which migrates it, then reset it"
        );
    };
    let definition = store
        .load_machine(&record.workflow, version)
        .await?
        .with_context(|| {
            format!(
                "machine version {version} of workflow \"{}\" is not in this store; nothing was \
                 reset",
                record.workflow
            )
        })?;
    // The initial state needs no guard of the plugin's (nothing is decided by an event yet).
    let guards = std::sync::Arc::new(crate::catalog::Unavailable);
    let machine = Machine::from_json_with_guards(&definition, guards).with_context(|| {
        format!(
            "the stored machine version {version} of workflow \"{}\" does not load",
            record.workflow
        )
    })?;
    let snapshot = machine.initial_snapshot_at(now_ms());
    let mut next = record.next(snapshot.to_persisted());
    next.idempotency.clear();
    // Due now: a server sharing the store looks at it at once (a server on the embedded store,
    // when it starts) and sets its due time from the new state's timers and its own retention
    // settings, which this command does not know.
    next.due_at_ms = Some(now_ms());
    next.audit = Some(AuditEntry {
        confirmation: None,
        at_ms: next.updated_at_ms,
        version: next.version,
        by: "operator:reset".into(),
        event: None,
        from: record.snapshot["value"].clone(),
        to: snapshot.value(),
        principal: None,
    });
    next.fence = fence.cloned();
    match store.save(key, &next, record.version).await {
        Ok(()) => {}
        Err(StoreError::Conflict { .. } | StoreError::Fenced { .. }) => {
            bail!(changed_meanwhile(key))
        }
        Err(error) => return Err(error.into()),
    }
    announce(store, key).await;
    Ok(snapshot.value())
}

fn changed_meanwhile(key: &str) -> String {
    format!(
        "{key} changed while this command ran (a server moved it); nothing was done: run it again"
    )
}

/// Tells the servers sharing the store that `key` changed, so they drop their copy. A failure
/// costs them a stale copy until their next call conflicts and reloads it: logged, not fatal.
async fn announce(store: &dyn StateStore, key: &str) {
    if let Err(error) = store.announce_change(ANNOUNCER, key).await {
        tracing::warn!(%key, %error, "could not tell running servers about the change");
    }
}

fn report(
    out: &mut impl Write,
    json: bool,
    done: &str,
    key: &str,
    state: Option<&Value>,
) -> anyhow::Result<()> {
    if json {
        let mut line = json!({ "key": key, "done": done });
        if let Some(state) = state {
            line["state"] = state.clone();
        }
        writeln!(out, "{line}")?;
    } else {
        match state {
            Some(state) => writeln!(out, "{done} {key}: now in state {}", state_text(state))?,
            None => writeln!(out, "{done} {key}")?,
        }
    }
    Ok(())
}

/// One line of a listing.
fn summary(key: &str, record: &InstanceRecord) -> Value {
    json!({
        "key": key,
        "workflow": record.workflow,
        "state": record.snapshot["value"],
        "status": record.snapshot["status"],
        "version": record.version,
        "updated_at_ms": record.updated_at_ms,
    })
}

/// Everything `show` prints.
fn describe(key: &str, record: &InstanceRecord) -> Value {
    let mut shown = summary(key, record);
    shown["machine"] = json!(record.machine);
    shown["format"] = json!(record.format);
    shown["context"] = record.snapshot["context"].clone();
    shown["timers"] = record.snapshot["timers"].clone();
    shown["idempotency_entries"] = json!(record.idempotency.len());
    shown
}

/// The state paths active in a state value: `"review"` → `review`; `{"a": "b"}` → `a`, `a.b`.
fn active_paths(value: &Value) -> Vec<String> {
    fn walk(value: &Value, prefix: &str, out: &mut Vec<String>) {
        let join = |name: &str| {
            if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}.{name}")
            }
        };
        match value {
            Value::String(name) => out.push(join(name)),
            Value::Object(children) => {
                for (name, child) in children {
                    let path = join(name);
                    out.push(path.clone());
                    walk(child, &path, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out
}

fn state_text(value: &Value) -> String {
    match value {
        Value::String(name) => name.clone(),
        other => other.to_string(),
    }
}

/// How long ago `at_ms` was, for a person: `42s`, `5m`, `3h`, `2d`.
fn age(at_ms: u64) -> String {
    let secs = now_ms().saturating_sub(at_ms) / 1000;
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn definition() -> Value {
        json!({"id": "doc", "initial": "draft", "context": {"n": 0}, "states": {
            "draft": {"on": {"GO": {"target": "review",
                "actions": [{"type": "xstate.assign", "params": {"n": 7}}]}}},
            "review": {"initial": "a", "states": {"a": {}}}
        }})
    }

    /// Stores one instance of `machine()` moved to `review`, as a server would.
    async fn stored(store: &MemoryStore, key: &str) -> InstanceRecord {
        let machine = Machine::from_json(&definition()).unwrap();
        let version = crate::catalog::machine_version(&definition());
        store
            .save_machine("doc", &version, &definition())
            .await
            .unwrap();
        let moved = machine
            .step(
                &machine.initial_snapshot_at(0),
                &crate::statechart::Event::new("GO"),
                0,
            )
            .unwrap();
        let mut record = InstanceRecord::first("doc", moved.snapshot.to_persisted());
        record.machine = Some(version);
        store.save(key, &record, 0).await.unwrap();
        record
    }

    async fn run_text(store: &MemoryStore, action: Action) -> anyhow::Result<String> {
        let mut out = Vec::new();
        run(store, action, true, &mut out).await?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[tokio::test]
    async fn list_filters_by_workflow_state_and_age() {
        let store = MemoryStore::default();
        stored(&store, "handle/doc-1").await;
        stored(&store, "handle/doc-2@0123").await;
        let all = Filter {
            limit: 100,
            ..Filter::default()
        };
        let listed = |filter: Filter| {
            let store = &store;
            async move {
                run_text(store, Action::List(filter))
                    .await
                    .unwrap()
                    .lines()
                    .count()
            }
        };
        assert_eq!(listed(all.clone()).await, 2);
        let nested = Filter {
            state: Some("review.a".into()),
            ..all.clone()
        };
        assert_eq!(listed(nested).await, 2);
        let other_state = Filter {
            state: Some("draft".into()),
            ..all.clone()
        };
        assert_eq!(listed(other_state).await, 0);
        let other_workflow = Filter {
            workflow: Some("invoice".into()),
            ..all.clone()
        };
        assert_eq!(listed(other_workflow).await, 0);
        let old = Filter {
            older_than_secs: Some(3600),
            ..all.clone()
        };
        assert_eq!(listed(old).await, 0, "both were saved just now");
        let one = Filter { limit: 1, ..all };
        assert_eq!(listed(one).await, 1);
    }

    #[tokio::test]
    async fn an_instance_is_found_by_handle_shown_reset_and_deleted() {
        let store = MemoryStore::default();
        stored(&store, "handle/doc-1@0123").await;
        let shown: Value = serde_json::from_str(
            &run_text(
                &store,
                Action::Show {
                    instance: "doc-1".into(),
                    last: None,
                },
            )
            .await
            .unwrap(),
        )
        .unwrap();
        assert_eq!(shown["key"], "handle/doc-1@0123");
        assert_eq!(shown["state"], json!({"review": "a"}));
        assert_eq!(shown["context"], json!({"n": 7}));

        run_text(
            &store,
            Action::Reset {
                instance: "doc-1".into(),
            },
        )
        .await
        .unwrap();
        let record = store.load("handle/doc-1@0123").await.unwrap().unwrap();
        assert_eq!(record.version, 2);
        assert_eq!(record.snapshot["value"], "draft");
        assert_eq!(record.snapshot["context"], json!({"n": 0}));
        // The reset is in the trail; `--last 0` shows none of it, and says how many there are.
        let shown: Value = serde_json::from_str(
            &run_text(
                &store,
                Action::Show {
                    instance: "doc-1".into(),
                    last: Some(0),
                },
            )
            .await
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (shown["audit_total"].clone(), shown["audit"].clone()),
            (json!(1), json!([]))
        );

        run_text(
            &store,
            Action::Delete {
                instance: "handle/doc-1@0123".into(),
            },
        )
        .await
        .unwrap();
        assert!(store.load("handle/doc-1@0123").await.unwrap().is_none());
        let gone = run_text(
            &store,
            Action::Show {
                instance: "doc-1".into(),
                last: None,
            },
        )
        .await;
        assert!(gone.unwrap_err().to_string().contains("no instance doc-1"));
    }
}

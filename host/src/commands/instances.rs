//! `turnstile instances`: what an operator needs to see and fix workflow instances, without a
//! client and without the plugins: list them (by workflow, state, age), show one with its audit
//! trail (`store/audit.rs`), reset one to its machine's initial state (which the trail records as
//! `operator:reset`), delete one (its trail with it), and count them all again into the store's
//! counts by state (`repair`, `instances/recount.rs`).
//!
//! Either it opens the store the way `serve` does and works on it directly (`instances/query.rs`
//! and `instances/repair.rs`: compare-and-set writes, announced on the store's change feed, so
//! servers sharing a Redis or PostgreSQL store see them; the embedded store is one process's
//! file, so stop the server first, which the command says when the file is in use), or, with
//! `--server URL`, it asks a running server through its console's API (`instances/remote.rs`),
//! on whatever store that server uses. Both are the same code as the console's.

use std::{io::Write, path::PathBuf, process::ExitCode};

use anyhow::bail;
use serde_json::{Value, json};

use crate::{
    instances::{self, Filter, Summary, remote::Remote, repair},
    store::{self, DeleteKind, StateStore, StoreOptions},
};

/// `turnstile instances …`: the store to open, as `serve` names it (or a server to ask), and
/// what to do.
#[derive(clap::Args, Debug)]
pub struct InstancesArgs {
    /// The store: `embedded:PATH`, `redis://…`, `postgres://…` (default: the embedded store in
    /// the data directory, as `serve` uses it).
    #[arg(long, env = "TURNSTILE_STORE", conflicts_with = "server")]
    pub store: Option<String>,
    /// The deployment's namespace in a shared store (as given to `serve`).
    #[arg(long, env = "TURNSTILE_STORE_NAMESPACE", default_value = "turnstile")]
    pub store_namespace: String,
    /// The data directory of the default embedded store (as given to `serve`).
    #[arg(long, env = "TURNSTILE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Ask this running server (`http://HOST:PORT`, or `https://HOST:PORT` for one serving
    /// TLS) through its console's API instead of opening a store: works on any store while
    /// servers run.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// With an `https://` --server: also trust the PEM certificates in this file (the server's
    /// self-signed certificate, or the private CA that signed it), besides the system's roots.
    #[arg(long, value_name = "FILE", requires = "server")]
    pub ca_file: Option<PathBuf>,
    /// With --server: a file holding an operator's bearer token (its first line that is not
    /// blank or a `#` comment).
    #[arg(long, value_name = "FILE", requires = "server")]
    pub token_file: Option<PathBuf>,
    /// Print JSON, one object per line, instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub command: InstancesCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum InstancesCommand {
    /// Lists instances (handle- and session-keyed): key, workflow, state, status, version, last
    /// save.
    List {
        #[arg(long)]
        workflow: Option<String>,
        /// A state path active in the instance (`review`, or `parent.child`).
        #[arg(long)]
        state: Option<String>,
        /// Only instances whose last save is at least SECS old.
        #[arg(long, value_name = "SECS")]
        older_than: Option<u64>,
        /// Only the instances of this principal, named as the audit trail names it
        /// (`token:NAME`, `oauth:ISSUER#SUB`), read from the store's per-owner index.
        #[arg(long, value_name = "PRINCIPAL")]
        principal: Option<String>,
        /// Only instances whose key comes after KEY: the next page, from the last key of a
        /// full one (the text listing says which when there may be more).
        #[arg(long, value_name = "KEY")]
        after: Option<String>,
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Shows one instance (a handle, or a store key from `list`): state, context (secrets
    /// redacted), timers, and its audit trail (each transition: when, by which tool or timer,
    /// from, to, principal; the store keeps the last `--audit-keep` of them).
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
    /// Counts every instance again and rewrites the store's counts by state (what the console
    /// and `/metrics` show), saying which counts were wrong: for counts that drifted, as when
    /// servers of an older version wrote beside this one. Servers sharing a Redis or PostgreSQL
    /// store may go on serving meanwhile; the embedded store must be closed (stop the server).
    Repair,
}

/// Where the instances are.
pub enum Source<'a> {
    /// A store, opened here.
    Store(&'a dyn StateStore),
    /// A running server's console API.
    Server(&'a Remote),
}

/// Opens the store `args` names (or reaches the server) and runs the command, printing to
/// stdout.
pub fn run_cli(args: InstancesArgs) -> anyhow::Result<ExitCode> {
    let action = match args.command {
        InstancesCommand::List {
            workflow,
            state,
            older_than,
            principal,
            after,
            limit,
        } => Action::List(Filter {
            workflow,
            state,
            older_than_secs: older_than,
            principal,
            after,
            limit,
        }),
        InstancesCommand::Show { instance, last } => Action::Show { instance, last },
        InstancesCommand::Reset { instance } => Action::Reset { instance },
        InstancesCommand::Delete { instance } => Action::Delete { instance },
        InstancesCommand::Repair => Action::Repair,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Some(url) = &args.server {
        let remote = Remote::new(url, args.token_file.as_deref(), args.ca_file.as_deref())?;
        return runtime.block_on(run_on(
            Source::Server(&remote),
            action,
            args.json,
            &mut std::io::stdout().lock(),
        ));
    }
    let url = match args.store {
        Some(url) => url,
        None => super::serve::default_store(&super::serve::data_dir(args.data_dir)),
    };
    if url.starts_with("memory:") {
        bail!(
            "the memory store lives inside one server process: there is nothing to open (ask the \
             server with --server URL)"
        );
    }
    // Opening an embedded store creates it: a mistyped path would show an empty store.
    if let Some(path) = url.strip_prefix("embedded:")
        && !std::path::Path::new(path).exists()
    {
        bail!("there is no embedded store at {path} (give --data-dir or --store as to serve)");
    }
    runtime.block_on(async {
        let options = StoreOptions {
            namespace: args.store_namespace,
            ..StoreOptions::default()
        };
        let store = store::open(&url, &options).await.map_err(|error| {
            if url.starts_with("embedded:") {
                anyhow::anyhow!(
                    "cannot open {url}: {error}. The embedded store is one process's file: if a \
                     server is running on it, stop it first, or ask it with --server URL"
                )
            } else {
                anyhow::anyhow!("cannot open the store: {error}")
            }
        })?;
        run(&*store, action, args.json, &mut std::io::stdout().lock()).await
    })
}

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
    Repair,
}

/// Runs `action` against `store`, writing what it finds to `out` (one JSON object per line with
/// `json`, else text for a person).
pub async fn run(
    store: &dyn StateStore,
    action: Action,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    run_on(Source::Store(store), action, json, out).await
}

/// Runs `action` against `source`, writing what it finds to `out`.
pub async fn run_on(
    source: Source<'_>,
    action: Action,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    match action {
        Action::List(filter) => {
            let listed = match source {
                Source::Store(store) => instances::list(store, &filter).await?,
                Source::Server(remote) => remote.list(&filter).await?,
            };
            print_list(&listed, filter.next_after(&listed), json, out)?;
        }
        Action::Show { instance, last } => {
            let shown = match source {
                Source::Store(store) => instances::show(store, &instance, last).await?,
                Source::Server(remote) => remote.show(&instance, last).await?,
            };
            if json {
                writeln!(out, "{shown}")?;
            } else if let Some(text) = shown["deleted"]["text"].as_str() {
                // A tombstone: say so in a line, not as JSON to decipher.
                writeln!(
                    out,
                    "{} ({}): {text}",
                    shown["key"].as_str().unwrap_or("?"),
                    shown["workflow"].as_str().unwrap_or("?")
                )?;
            } else {
                writeln!(out, "{}", serde_json::to_string_pretty(&shown)?)?;
            }
        }
        Action::Reset { instance } => {
            let (key, state) = match source {
                Source::Store(store) => {
                    let (key, _) = instances::find(store, &instance).await?;
                    let state = repair::reset(store, &key, None).await?;
                    (key, state)
                }
                Source::Server(remote) => {
                    let done = remote.act("reset", &instance).await?;
                    (done.key, done.state.unwrap_or_default())
                }
            };
            report(out, json, "reset", &key, Some(&state))?;
        }
        Action::Delete { instance } => {
            let key = match source {
                Source::Store(store) => {
                    let (key, _) = instances::find(store, &instance).await?;
                    repair::delete(store, &key, &repair::cli_user(), DeleteKind::Cli).await?;
                    key
                }
                Source::Server(remote) => remote.act("delete", &instance).await?.key,
            };
            report(out, json, "deleted", &key, None)?;
        }
        Action::Repair => {
            let Source::Store(store) = source else {
                bail!(
                    "repair counts the records of a store: open it (--store, or --data-dir for \
                     the embedded store, once its server is stopped) rather than --server"
                );
            };
            print_recounted(&instances::recount::recount(store).await?, json, out)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_recounted(
    recounted: &instances::recount::Recounted,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_value(recounted)?)?;
        return Ok(());
    }
    for line in &recounted.corrected {
        let state = if line.state.is_empty() {
            "(all)"
        } else {
            &line.state
        };
        writeln!(
            out,
            "corrected {} {} {state}: {} -> {}",
            line.workflow,
            if line.machine.is_empty() {
                "(no version)"
            } else {
                &line.machine
            },
            line.was,
            line.now
        )?;
    }
    writeln!(
        out,
        "counted {} instance(s); {} count(s) corrected",
        recounted.instances,
        recounted.corrected.len()
    )?;
    Ok(())
}

/// Prints a listing; `next`, for a full page, is the key the next one starts after.
fn print_list(
    listed: &[Summary],
    next: Option<&str>,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if json {
        for summary in listed {
            writeln!(out, "{}", serde_json::to_value(summary)?)?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "{:<60} {:<14} {:<24} {:<8} {:>8}  UPDATED",
        "KEY", "WORKFLOW", "STATE", "STATUS", "VERSION"
    )?;
    for summary in listed {
        writeln!(
            out,
            "{:<60} {:<14} {:<24} {:<8} {:>8}  {}",
            summary.key,
            summary.workflow,
            instances::state_text(&summary.state),
            summary.status.as_str().unwrap_or("?"),
            summary.version,
            instances::age(summary.updated_at_ms)
        )?;
    }
    writeln!(out, "{} instance(s)", listed.len())?;
    if let Some(next) = next {
        writeln!(out, "there may be more: the next page is --after '{next}'")?;
    }
    Ok(())
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
            Some(state) => writeln!(
                out,
                "{done} {key}: now in state {}",
                instances::state_text(state)
            )?,
            None => writeln!(out, "{done} {key}")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        statechart::Machine,
        store::{InstanceRecord, MemoryStore},
    };

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
        // Its tombstone answers for it: deleted by the CLI, in its last state.
        let gone = gone.unwrap();
        assert!(
            gone.contains("deleted at ") && gone.contains("(cli) in state draft (version 2)"),
            "{gone}"
        );
        let never = run_text(
            &store,
            Action::Show {
                instance: "doc-9".into(),
                last: None,
            },
        )
        .await;
        assert!(never.unwrap_err().to_string().contains("no instance doc-9"));
    }

    #[tokio::test]
    async fn repair_counts_every_instance_again_and_says_what_it_corrected() {
        let store = MemoryStore::default();
        stored(&store, "handle/doc-1").await;
        stored(&store, "handle/doc-2@0123").await;
        let repaired: Value =
            serde_json::from_str(&run_text(&store, Action::Repair).await.unwrap()).unwrap();
        assert_eq!(repaired, json!({"instances": 2, "corrected": []}));
        let mut out = Vec::new();
        run(&store, Action::Repair, false, &mut out).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "counted 2 instance(s); 0 count(s) corrected\n"
        );
    }
}

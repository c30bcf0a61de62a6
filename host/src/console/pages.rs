//! The console's HTML, rendered here with `maud` (checked at compile time, escaped by default).
//! Every page is whole without its script: forms are plain GETs and POSTs, and only the live
//! counts need `console.js`. Nothing here is inline script or style (the Content-Security-Policy
//! forbids both, but for the diagrams' own stylesheet, allowed by its hash in `routes.rs`).

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde_json::Value;

use super::{SessionFigures, live::Counts, rates::Window};
use crate::{
    actors::{NotifierStats, RegistryStats},
    instances::{Filter, Summary, age, state_text},
};

/// Which tab of the navigation a page is under.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Workflows,
    Instances,
    Server,
    None,
}

/// The frame of every page.
fn layout(tab: Tab, title: &str, signed_in: bool, body: Markup) -> Markup {
    let link = |to: Tab, href: &str, text: &str| {
        html! {
            a href=(href) aria-current=[(tab == to).then_some("page")] { (text) }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Turnstile console" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header {
                    span.brand { "Turnstile" }
                    nav {
                        (link(Tab::Workflows, "/console", "Workflows"))
                        (link(Tab::Instances, "/console/instances", "Instances"))
                        (link(Tab::Server, "/console/server", "Server"))
                    }
                    @if signed_in {
                        form.logout method="post" action="/console/logout" {
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The login form, with why the last attempt (or the request) was refused.
pub fn login(refused: Option<&str>) -> Markup {
    layout(
        Tab::None,
        "Log in",
        false,
        html! {
            @if let Some(reason) = refused {
                p.problem role="alert" { (reason) }
            }
            p { "The console is for operators: give a token marked " code { "operator" }
                " in the server's token file, or an access token with its operator scope." }
            form.login method="post" action="/console/login" {
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="current-password" required;
                button type="submit" { "Log in" }
            }
        },
    )
}

/// A refusal or failure, as a page.
pub fn problem(signed_in: bool, message: &str) -> Markup {
    layout(
        Tab::None,
        "Not done",
        signed_in,
        html! {
            p.problem role="alert" { (message) }
            p { a href="/console/instances" { "Back to the instances" } }
        },
    )
}

/// One workflow on the workflows page: its diagram and its states.
pub struct WorkflowShown {
    pub id: String,
    pub version: String,
    pub svg: String,
    pub states: Vec<String>,
}

/// `/console`: every loaded workflow, its diagram and its instances per state.
pub fn workflows(signed_in: bool, workflows: &[WorkflowShown], counts: &Counts) -> Markup {
    let count = |workflow: &str, state: Option<&str>| {
        counts.get(workflow).map_or(0, |count| match state {
            None => count.total,
            Some(state) => count.states.get(state).copied().unwrap_or(0),
        })
    };
    layout(
        Tab::Workflows,
        "Workflows",
        signed_in,
        html! {
            @if workflows.is_empty() {
                p { "No plugin loaded here brings a workflow." }
            }
            p.live-status #live-status hidden { "Counts update live." }
            @for workflow in workflows {
                section.workflow data-workflow=(workflow.id) {
                    h2 #{ "workflow-" (workflow.id) } { (workflow.id) }
                    p.version { "machine version " code { (workflow.version) } }
                    div.panels {
                        figure.diagram { (PreEscaped(&workflow.svg)) }
                        table.counts {
                            caption { "Instances per state" }
                            thead { tr { th scope="col" { "State" } th scope="col" { "Instances" } } }
                            tbody {
                                @for state in &workflow.states {
                                    tr {
                                        th scope="row" {
                                            a href=(instances_href(&workflow.id, Some(state))) { (state) }
                                        }
                                        td.count data-workflow=(workflow.id) data-state=(state) {
                                            (count(&workflow.id, Some(state)))
                                        }
                                    }
                                }
                                tr.total {
                                    th scope="row" { a href=(instances_href(&workflow.id, None)) { "all" } }
                                    td.count data-workflow=(workflow.id) data-state="" {
                                        (count(&workflow.id, None))
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The query of the listing page after `next`, with `filter`'s other fields.
fn next_page_query(filter: &Filter, next: &str) -> String {
    let older_than = filter.older_than_secs.map(|secs| secs.to_string());
    let limit = filter.limit.to_string();
    let mut query = vec![("after", next), ("limit", limit.as_str())];
    for (name, value) in [
        ("workflow", filter.workflow.as_deref()),
        ("state", filter.state.as_deref()),
        ("older_than", older_than.as_deref()),
        ("principal", filter.principal.as_deref()),
    ] {
        if let Some(value) = value {
            query.push((name, value));
        }
    }
    encode(&query)
}

fn instances_href(workflow: &str, state: Option<&str>) -> String {
    let mut query = vec![("workflow", workflow)];
    if let Some(state) = state {
        query.push(("state", state));
    }
    format!("/console/instances?{}", encode(&query))
}

/// A query string.
pub fn encode(pairs: &[(&str, &str)]) -> String {
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// `/console/instances`: the search form, the filters, and what they found.
pub fn instances(
    signed_in: bool,
    workflows: &[String],
    filter: &Filter,
    listed: &[Summary],
    notice: Option<&str>,
) -> Markup {
    layout(
        Tab::Instances,
        "Instances",
        signed_in,
        html! {
            @if let Some(notice) = notice { p.notice role="status" { (notice) } }
            form.find method="get" action="/console/instance" {
                label for="find-id" { "Handle or key" }
                input #find-id type="search" name="id" required placeholder="a handle, or handle/… session/…";
                button type="submit" { "Find" }
            }
            form.filter method="get" action="/console/instances" {
                label for="f-workflow" { "Workflow" }
                select #f-workflow name="workflow" {
                    option value="" { "any" }
                    @for id in workflows {
                        option value=(id) selected[filter.workflow.as_deref() == Some(id.as_str())] { (id) }
                    }
                }
                label for="f-state" { "State" }
                input #f-state type="text" name="state" value=[filter.state.as_deref()] placeholder="review, or a.b";
                label for="f-older" { "Older than (s)" }
                input #f-older type="number" min="0" name="older_than" value=[filter.older_than_secs];
                label for="f-principal" { "Principal" }
                input #f-principal type="text" name="principal" value=[filter.principal.as_deref()] placeholder="token:NAME, oauth:ISSUER#SUB";
                label for="f-limit" { "At most" }
                input #f-limit type="number" min="1" name="limit" value=(filter.limit);
                button type="submit" { "Filter" }
            }
            table.instances {
                caption {
                    (listed.len()) " instance(s)"
                    @if let Some(next) = filter.next_after(listed) {
                        " (a page of " (filter.limit) ") "
                        a #next-page href={ "/console/instances?" (next_page_query(filter, next)) } { "Next page" }
                    }
                }
                thead { tr {
                    th scope="col" { "Key" } th scope="col" { "Workflow" } th scope="col" { "State" }
                    th scope="col" { "Status" } th scope="col" { "Version" } th scope="col" { "Last moved" }
                } }
                tbody {
                    @for summary in listed {
                        tr {
                            td { a.key href={ "/console/instance?" (encode(&[("id", &summary.key)])) } { (summary.key) } }
                            td { (summary.workflow) }
                            td.state { (state_text(&summary.state)) }
                            td {
                                (summary.status.as_str().unwrap_or("?"))
                                @if let Some(running) = &summary.running {
                                    " " span.running title={ "task " (running.task_id) } { "running " (running.tool) }
                                }
                            }
                            td.num { (summary.version) }
                            td { time datetime=(utc(summary.updated_at_ms)) { (age(summary.updated_at_ms)) } }
                        }
                    }
                }
            }
        },
    )
}

/// `/console/instance?id=…`: one instance, as `turnstile instances show` tells it, with its
/// diagram (`svg`, every state it is in lit: one per region of a parallel state) and the reset
/// and delete buttons.
pub fn instance(signed_in: bool, shown: &Value, svg: Option<&str>, notice: Option<&str>) -> Markup {
    let key = shown["key"].as_str().unwrap_or_default();
    let id = encode(&[("id", key)]);
    let audit = shown["audit"].as_array().cloned().unwrap_or_default();
    let timers = shown["timers"].as_array().cloned().unwrap_or_default();
    layout(
        Tab::Instances,
        &format!("Instance {key}"),
        signed_in,
        html! {
            @if let Some(notice) = notice { p.notice role="status" { (notice) } }
            dl.summary {
                dt { "Workflow" } dd { (shown["workflow"].as_str().unwrap_or("?")) }
                dt { "State" } dd.state #instance-state { (state_text(&shown["state"])) }
                dt { "Status" } dd { (shown["status"].as_str().unwrap_or("?")) }
                dt { "Version" } dd { (shown["version"]) }
                dt { "Machine version" } dd { code { (shown["machine"].as_str().unwrap_or("-")) } }
                dt { "Last moved" } dd { (utc_of(&shown["updated_at_ms"])) }
                @if let Some(task) = shown["running"].as_object() {
                    dt { "Running" }
                    dd #instance-running {
                        code { (task["tool"].as_str().unwrap_or("?")) } " as task "
                        code { (task["task_id"].as_str().unwrap_or("?")) }
                        ", since " (utc_of(&task["since_ms"]))
                    }
                }
            }
            section.actions {
                a.button href={ "/console/instance/reset?" (id) } { "Reset…" }
                a.button.danger href={ "/console/instance/delete?" (id) } { "Delete…" }
            }
            section {
                h2 { "Diagram" }
                @match svg {
                    Some(svg) => figure.diagram { (PreEscaped(svg)) },
                    None => p { "No diagram: no plugin loaded here brings this workflow's machine." },
                }
            }
            section {
                h2 { "Context" }
                pre.context { (serde_json::to_string_pretty(&shown["context"]).unwrap_or_default()) }
            }
            section {
                h2 { "Pending timers" }
                @if timers.is_empty() { p { "None." } } @else {
                    table.timers {
                        thead { tr { th scope="col" { "Event" } th scope="col" { "Due" } } }
                        tbody { @for timer in &timers { tr {
                            td { code { (timer["event"].as_str().unwrap_or("?")) } }
                            td { (utc_of(&timer["deadline"])) }
                        } } }
                    }
                }
            }
            section {
                h2 { "Audit trail" }
                p { (shown["audit_total"]) " transition(s) kept, oldest first." }
                table.audit #audit {
                    thead { tr {
                        th scope="col" { "When" } th scope="col" { "Who" } th scope="col" { "By" }
                        th scope="col" { "Event" } th scope="col" { "From" } th scope="col" { "To" }
                    } }
                    tbody { @for entry in &audit { tr {
                        td { (utc_of(&entry["at_ms"])) }
                        td.who { (entry["principal"].as_str().unwrap_or("-")) }
                        td.by { code { (entry["by"].as_str().unwrap_or("?")) } }
                        td { (entry["event"].as_str().unwrap_or("-")) }
                        td { (state_or_dash(&entry["from"])) }
                        td { (state_or_dash(&entry["to"])) }
                    } } }
                }
            }
        },
    )
}

/// `/console/instance?id=…` of a deleted instance: its tombstone (who deleted it, when, in
/// which state), rather than "not found", and nothing to act on.
pub fn deleted(signed_in: bool, shown: &Value) -> Markup {
    let key = shown["key"].as_str().unwrap_or_default();
    let deleted = &shown["deleted"];
    layout(
        Tab::Instances,
        &format!("Instance {key} (deleted)"),
        signed_in,
        html! {
            p.notice.deleted role="status" #instance-deleted {
                "This instance was " (deleted["text"].as_str().unwrap_or("deleted")) "."
            }
            dl.summary {
                dt { "Workflow" } dd { (shown["workflow"].as_str().unwrap_or("?")) }
                dt { "Last state" } dd.state #instance-state { (state_text(&shown["state"])) }
                dt { "Version" } dd { (shown["version"]) }
                dt { "Deleted" } dd { (utc_of(&deleted["at_ms"])) }
                dt { "By" } dd.who { (deleted["by"].as_str().unwrap_or("?")) }
                dt { "How" } dd { (deleted["kind"].as_str().unwrap_or("?")) }
            }
            p { a href="/console/instances" { "Back to the instances" } }
        },
    )
}

fn state_or_dash(value: &Value) -> String {
    if value.is_null() {
        "-".into()
    } else {
        state_text(value)
    }
}

/// The confirmation a reset or delete asks for, as a page: the form that does it.
pub fn confirm(signed_in: bool, act: &str, key: &str, state: &Value) -> Markup {
    let (title, warning) = match act {
        "reset" => (
            "Reset this instance?",
            "It goes back to its machine's initial state and context; the reset is recorded in its audit trail under your name.",
        ),
        _ => (
            "Delete this instance?",
            "Its record and audit trail are removed; its handle then answers UNKNOWN_HANDLE. This cannot be undone.",
        ),
    };
    layout(
        Tab::Instances,
        title,
        signed_in,
        html! {
            p { code { (key) } ", now in state " strong { (state_text(state)) } "." }
            p.warning { (warning) }
            form.confirm method="post" action={ "/console/instance/" (act) } {
                input type="hidden" name="id" value=(key);
                button.danger type="submit" { "Yes, " (act) }
                " "
                a href={ "/console/instance?" (encode(&[("id", key)])) } { "Cancel" }
            }
        },
    )
}

/// One plugin, as the server page lists it.
pub struct PluginShown {
    pub name: String,
    pub version: String,
    pub abi: String,
    pub isolated: bool,
    pub pool_size: usize,
    pub running: usize,
    pub past_deadline: u64,
    pub crashes: Option<u64>,
}

/// What the server page shows.
pub struct ServerShown {
    pub plugins: Vec<PluginShown>,
    pub sessions: SessionFigures,
    pub registry: Option<RegistryStats>,
    pub notifier: Option<NotifierStats>,
    pub windows: BTreeMap<&'static str, Option<Window>>,
    pub store: String,
    pub shared: bool,
    /// `Ok(ms)`: answered a ping in that long; `Err`: why not.
    pub health: Result<u64, String>,
}

/// `/console/server`.
pub fn server(signed_in: bool, shown: &ServerShown) -> Markup {
    layout(
        Tab::Server,
        "Server",
        signed_in,
        html! {
            section {
                h2 { "Plugins" }
                table.plugins {
                    thead { tr {
                        th scope="col" { "Name" } th scope="col" { "Version" } th scope="col" { "ABI" }
                        th scope="col" { "Isolated" } th scope="col" { "Pool in use" }
                        th scope="col" { "Past deadline" } th scope="col" { "Crashes" }
                    } }
                    tbody { @for plugin in &shown.plugins { tr {
                        td { (plugin.name) } td { (plugin.version) } td { (plugin.abi) }
                        td { @if plugin.isolated { "yes" } @else { "no" } }
                        td.num { (plugin.running) " / " (plugin.pool_size) }
                        td.num { (plugin.past_deadline) }
                        td.num { @match plugin.crashes { Some(n) => (n), None => "-" } }
                    } } }
                }
            }
            section {
                h2 { "Sessions and streams" }
                dl.figures {
                    dt { "HTTP sessions held" } dd { (shown.sessions.held) }
                    dt { "in their handshake" } dd { (shown.sessions.in_handshake) }
                    dt { "passivated" } dd { (shown.sessions.passivated) }
                    @if let Some(notifier) = &shown.notifier {
                        dt { "Sessions and listen streams hearing list_changed" } dd { (notifier.sessions) }
                        dt { "Subscriptions" } dd { (notifier.subscriptions) }
                        dt { "Instances watched" } dd { (notifier.watched_instances) }
                    }
                    @if let Some(registry) = &shown.registry {
                        dt { "Instances in memory" } dd { (registry.instances) }
                        dt { "of them session-keyed" } dd { (registry.session_instances) }
                        dt { "Passivated since start" } dd { (registry.passivated) }
                    }
                }
            }
            section {
                h2 { "Calls" }
                table.rates {
                    thead { tr { th scope="col" { "Over the last" } th scope="col" { "Calls" } th scope="col" { "Calls/s" } th scope="col" { "p99" } } }
                    tbody { @for (label, window) in &shown.windows { tr {
                        th scope="row" {
                            (label)
                            @if let Some(window) = window { " (" (window.seconds) " s measured)" }
                        }
                        @match window {
                            Some(window) => {
                                td.num { (window.calls) }
                                td.num { (format!("{:.2}", window.calls_per_second)) }
                                td.num { @match window.p99_ms { Some(ms) => { "≤ " (ms) " ms" }, None => "-" } }
                            }
                            None => td colspan="3" { "not measured yet (a reading every 5 s)" }
                        }
                    } } }
                }
            }
            section {
                h2 { "Store" }
                dl.figures {
                    dt { "Store" } dd { code { (shown.store) } }
                    dt { "Shared with other servers" } dd { @if shown.shared { "yes" } @else { "no" } }
                    dt { "Health" }
                    @match &shown.health {
                        Ok(ms) => dd.healthy { "answers (" (ms) " ms)" },
                        Err(reason) => dd.unhealthy { "not answering: " (reason) },
                    }
                }
            }
        },
    )
}

/// A unix-milliseconds value as an ISO 8601 UTC time, or `-`.
fn utc_of(value: &Value) -> String {
    value.as_u64().map_or_else(|| "-".into(), utc)
}

pub use crate::instances::utc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_780_000_000_000), "2026-05-28T20:26:40Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn text_is_escaped() {
        let page = problem(true, "<script>alert(1)</script>").into_string();
        assert!(!page.contains("<script>alert"));
        assert!(page.contains("&lt;script&gt;"));
    }
}

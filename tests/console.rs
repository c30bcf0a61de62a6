//! The operator console (`/console`), as an operator sees it in a real browser (headless
//! Chromium through chromedriver), against the real binary, with a real MCP client (the Python
//! SDK) moving an invoice meanwhile; who may open it; and `turnstile instances --server`, which
//! works through its API.
//!
//! On a failure in the browser, a screenshot of the page is kept in
//! `<target>/console-screenshots/` (CI keeps it). Without Chromium the browser test fails under
//! `CI=true` and is skipped, saying why, elsewhere. One of them holds 100,000 instances (copied
//! into the embedded store through its API, which takes seconds) to show the counts do not scan.

mod common;

use std::{path::PathBuf, process::Command, time::Duration};

use common::{
    TokenFile,
    browser::Browser,
    python::{Sdk, run_scenario},
    start, target_dir, turnstile_bin,
};
use serde_json::{Value, json};

const OPERATOR: &str = "t-ops-4f1c";
const ALICE: &str = "t-alice-9b2e";

/// An invoice server in handle mode with an operator (`ops`) and a client (`alice`).
fn console_server(tokens: &TokenFile) -> (common::PluginDir, common::Server) {
    start(
        &["invoice"],
        &[
            "--state-handle-key",
            "handle",
            "--auth-token-file",
            tokens.arg(),
        ],
    )
}

fn tokens() -> TokenFile {
    TokenFile::with(&format!("ops {OPERATOR} operator\nalice {ALICE}\n"))
}

fn screenshots() -> PathBuf {
    target_dir().join("console-screenshots")
}

/// How long a page may take to show what a step looks for.
const PAGE: Duration = Duration::from_secs(10);

/// The workflows page's count of invoices in review.
const REVIEW_COUNT: &str = r#"td.count[data-workflow="invoice"][data-state="review"]"#;

/// Logging in: the console at `base` asks for a token, and takes the operator's.
async fn log_in(browser: &Browser, base: &str) -> Result<(), String> {
    browser.open(&format!("{base}/console")).await;
    let field = browser
        .wait_for("input#token", PAGE)
        .await
        .ok_or("no login form at /console without a token")?;
    browser.type_into(&field, OPERATOR).await;
    let submit = browser
        .find("form.login button")
        .await
        .ok_or("no login button")?;
    browser.click(&submit).await;
    Ok(())
}

/// Waits until the workflows page says its counts update live.
async fn live_updates_connected(browser: &Browser) -> Result<(), String> {
    browser
        .wait_for("p#live-status:not([hidden])", PAGE)
        .await
        .map(|_| ())
        .ok_or_else(|| "the live updates did not connect".to_owned())
}

/// Whether a browser test may run here: `false` (saying why) where no Chromium is installed,
/// outside CI; under `CI=true` its absence fails the test.
fn browser_here() -> bool {
    let Some(reason) = common::browser::missing() else {
        return true;
    };
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("the console's browser test cannot run: {reason}");
    }
    eprintln!("skipped: {reason}");
    false
}

/// The browser walk, step by step; `Err` says which step saw what.
async fn walk(browser: &Browser, server: &mut common::Server) -> Result<(), String> {
    let base = server.base();
    let review = REVIEW_COUNT;
    log_in(browser, &base).await?;

    // The invoice workflow's diagram, with a box per state, and its counts.
    let diagram = r#"section.workflow[data-workflow="invoice"] svg.turnstile-graph"#;
    browser
        .wait_for(diagram, PAGE)
        .await
        .ok_or("no invoice diagram after logging in")?;
    for state in ["draft", "review", "approved", "discharged"] {
        let node = format!(r#"{diagram} g.state[data-state="{state}"]"#);
        browser
            .find(&node)
            .await
            .ok_or_else(|| format!("the diagram has no box for {state}"))?;
    }
    browser.wait_for_text(review, "0", PAGE).await?;
    // The live stream is open before the invoice moves: the count must change in place.
    live_updates_connected(browser).await?;
    // The cell as this page shows it: a reloaded page would show another.
    let cell = browser.find(review).await.ok_or("no review count")?;

    // A client submits an invoice; the page's review count goes to 1 without a reload.
    let summary = run_scenario(Sdk::Mcp1, &format!("submit-invoice:{ALICE}"), server);
    let handle = summary["handle"].as_str().ok_or("no handle")?.to_owned();
    browser
        .wait_for_text(review, "1", Duration::from_secs(10))
        .await
        .map_err(|seen| format!("after the submit: {seen}"))?;
    if browser.find(review).await.as_ref() != Some(&cell) {
        return Err("the count changed only with a reload of the page".into());
    }

    // Found by its handle: review lit on its diagram, and the submit in its trail.
    browser.open(&format!("{base}/console/instances")).await;
    let find = browser
        .wait_for("input#find-id", PAGE)
        .await
        .ok_or("no search field")?;
    browser.type_into(&find, &handle).await;
    let go = browser
        .find("form.find button")
        .await
        .ok_or("no Find button")?;
    browser.click(&go).await;
    browser
        .wait_for(r#"svg g.state.active[data-state="review"]"#, PAGE)
        .await
        .ok_or_else(|| format!("review is not lit on {handle}'s diagram"))?;
    let trail = browser
        .text_of("table#audit tbody")
        .await
        .unwrap_or_default();
    if !(trail.contains("tool:invoice.submit") && trail.contains("token:alice")) {
        return Err(format!("the trail does not show alice's submit: {trail:?}"));
    }

    // Reset, confirmed: back in draft, the reset in the trail under the operator's name.
    let reset = browser
        .wait_for("section.actions a.button", PAGE)
        .await
        .ok_or("no Reset button")?;
    browser.click(&reset).await;
    let confirm = browser
        .wait_for("form.confirm button", PAGE)
        .await
        .ok_or("no confirmation asked for the reset")?;
    browser.click(&confirm).await;
    browser
        .wait_for_text("dd#instance-state", "draft", PAGE)
        .await?;
    let trail = browser
        .text_of("table#audit tbody")
        .await
        .unwrap_or_default();
    if !(trail.contains("operator:reset") && trail.contains("token:ops")) {
        return Err(format!(
            "the trail does not show the operator's reset: {trail:?}"
        ));
    }

    // And the workflow's review count fell back.
    browser.open(&format!("{base}/console")).await;
    browser
        .wait_for_text(review, "0", PAGE)
        .await
        .map_err(|seen| format!("after the reset: {seen}"))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_watches_an_invoice_arrive_finds_it_and_resets_it() {
    if !browser_here() {
        return;
    }
    let tokens = tokens();
    let (_plugins, mut server) = console_server(&tokens);
    let browser = Browser::start().await;
    if let Err(failure) = walk(&browser, &mut server).await {
        failed_in_browser(
            &browser,
            "an_operator_watches_an_invoice_arrive",
            &failure,
            &server,
        )
        .await;
    }
    browser.quit().await;
}

/// Fails the test with what the browser showed: `failure`, a screenshot kept as `name`, the
/// page's source and the server's log.
async fn failed_in_browser(
    browser: &Browser,
    name: &str,
    failure: &str,
    server: &common::Server,
) -> ! {
    let shot = browser.screenshot(&screenshots(), name).await;
    let page = browser.source().await;
    panic!(
        "{failure}\nscreenshot: {shot:?}\npage:\n{page}\nserver log:\n{}",
        server.stderr()
    );
}

/// How many invoices the console's scale test holds.
const MANY: u64 = 100_000;

/// Adds `copies` invoices to the embedded store `file`, each a copy of the one it holds under
/// a handle of its own, owned by the same tenant: written through the store as a server
/// writes a first save, so its indexes (the counts per state, the owners) count them.
async fn fill_with_copies(file: &std::path::Path, copies: u64) {
    use futures_util::{StreamExt, TryStreamExt};
    use turnstile::store::{EmbeddedStore, StateStore, owner_of};

    let store = EmbeddedStore::open(file)
        .await
        .expect("open the store file");
    let keys = store.list_keys("handle/", None, 2).await.unwrap();
    let [key] = &keys[..] else {
        panic!("one instance to copy, not {keys:?}");
    };
    let owner = owner_of(key).expect("an owned instance");
    let mut record = store.load(key).await.unwrap().expect("its record");
    record.version = 1;
    futures_util::stream::iter(0..copies)
        .map(|_| {
            let key = format!("handle/invoice-{}@{owner}", uuid::Uuid::new_v4().simple());
            let (store, record) = (&store, &record);
            async move { store.save(&key, record, 0).await }
        })
        .buffer_unordered(512)
        .try_collect::<()>()
        .await
        .expect("every copy saved");
    // Closing folds the journal into the file, as a server's clean stop does.
    tokio::task::spawn_blocking(move || drop(store))
        .await
        .unwrap();
}

/// The browser part of the scale test: the page counts `MANY` in review, and a client's
/// approval of `handle` shows on it within a second of its answer.
async fn a_move_among_many(
    browser: &Browser,
    server: &common::Server,
    handle: &str,
) -> Result<Duration, String> {
    log_in(browser, &server.base()).await?;
    browser
        .wait_for_text(REVIEW_COUNT, &MANY.to_string(), PAGE)
        .await?;
    live_updates_connected(browser).await?;
    let cell = browser.find(REVIEW_COUNT).await.ok_or("no review count")?;

    let client = common::Client::http_as(&server.url, ALICE).await;
    let approved = client
        .call("invoice.approve", json!({ "handle": handle }))
        .await;
    let answered = std::time::Instant::now();
    if approved.structured_content.as_ref().map(|s| &s["state"]) != Some(&json!("approved")) {
        return Err(format!("the approval was not made: {approved:?}"));
    }
    browser
        .wait_for_text(
            REVIEW_COUNT,
            &(MANY - 1).to_string(),
            Duration::from_secs(1),
        )
        .await
        .map_err(|seen| format!("within a second of the approval: {seen}"))?;
    let shown = answered.elapsed();
    let approved_count = r#"td.count[data-workflow="invoice"][data-state="approved"]"#;
    browser.wait_for_text(approved_count, "1", PAGE).await?;
    if browser.find(REVIEW_COUNT).await.as_ref() != Some(&cell) {
        return Err("the count changed only with a reload of the page".into());
    }
    client.close().await;
    Ok(shown)
}

/// Over 100,000 invoices the workflows page counts them all, and a client's move shows on the
/// open page within a second: the counts are the store's index, read again on each change, not
/// a scan of what is stored.
#[tokio::test(flavor = "multi_thread")]
async fn over_a_hundred_thousand_instances_a_move_shows_within_a_second() {
    if !browser_here() {
        return;
    }
    let tokens = tokens();
    let plugins = common::PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let flags = [
        "--state-handle-key",
        "handle",
        "--auth-token-file",
        tokens.arg(),
    ];
    let mut server = common::Server::http_in(plugins.path(), data.path(), &flags);
    let client = common::Client::http_as(&server.url, ALICE).await;
    let handle = common::handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    client.close().await;
    server.stop();

    let filling = std::time::Instant::now();
    fill_with_copies(&data.path().join("state.redb"), MANY - 1).await;
    eprintln!("{} invoices stored in {:?}", MANY, filling.elapsed());

    let server = common::Server::http_in(plugins.path(), data.path(), &flags);
    let browser = Browser::start().await;
    match a_move_among_many(&browser, &server, &handle).await {
        Ok(shown) => eprintln!("the move showed {shown:?} after the approval's answer"),
        Err(failure) => failed_in_browser(&browser, "a_move_among_many", &failure, &server).await,
    }
    browser.quit().await;
}

/// `GET path` with `token` (if any): the status and the body.
async fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let client = reqwest::Client::new();
    let mut request = client.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answer = request.send().await.expect("the server answers");
    let status = answer.status().as_u16();
    (status, answer.text().await.unwrap_or_default())
}

#[tokio::test]
async fn only_operators_get_in() {
    let tokens = tokens();
    let (_plugins, server) = console_server(&tokens);
    let base = server.base();
    for path in ["/console", "/console/instances", "/console/api/instances"] {
        let url = format!("{base}{path}");
        assert_eq!(get(&url, None).await.0, 401, "{path} without a token");
        assert_eq!(
            get(&url, Some("no-such-token")).await.0,
            401,
            "{path} with a wrong token"
        );
        let (status, body) = get(&url, Some(ALICE)).await;
        assert_eq!(status, 403, "{path} for a client: {body}");
        assert!(body.contains("token:alice is not an operator"), "{body}");
        assert_eq!(
            get(&url, Some(OPERATOR)).await.0,
            200,
            "{path} for the operator"
        );
    }
    // Every page is under the policy that forbids inline script.
    let answer = reqwest::Client::new()
        .get(format!("{base}/console"))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    let policy = answer.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        policy.contains("script-src 'self'") && !policy.contains("unsafe"),
        "{policy}"
    );
    // A form of another site cannot act, even with the operator's credentials.
    let refused = reqwest::Client::new()
        .post(format!("{base}/console/instance/reset"))
        .header("cookie", "turnstile_console=x")
        .header("origin", "https://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("id=anything")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 403);
}

/// Issue 50, item 8: a form of another site cannot log an operator out, as it cannot act: 403,
/// and no cookie is cleared. The console's own form (same origin) logs out.
#[tokio::test]
async fn a_cross_site_logout_is_refused() {
    let tokens = tokens();
    let (_plugins, server) = console_server(&tokens);
    let logout = format!("{}/console/logout", server.base());
    // Redirects are the answer here, not something to follow.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let post = |headers: &[(&str, &str)]| {
        let mut request = http
            .post(&logout)
            .header("cookie", "turnstile_console=x")
            .header("content-type", "application/x-www-form-urlencoded");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send()
    };
    for foreign in [
        [("origin", "https://evil.example")],
        [("sec-fetch-site", "cross-site")],
    ] {
        let refused = post(&foreign).await.unwrap();
        assert_eq!(refused.status().as_u16(), 403, "{foreign:?}");
        assert!(
            refused.headers().get("set-cookie").is_none(),
            "{foreign:?}: the cookie is kept"
        );
        let body = refused.text().await.unwrap();
        assert!(body.contains("another site"), "{body}");
    }
    let own = post(&[("sec-fetch-site", "same-origin")]).await.unwrap();
    assert_eq!(own.status().as_u16(), 303);
    let cleared = own.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cleared.starts_with("turnstile_console=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
}

/// `turnstile instances --server URL --token-file F ARGS…`: its stdout, or its stderr.
fn instances_cli(base: &str, token: &str, args: &[&str]) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("# the operator's\n{token}\n")).unwrap();
    let output = Command::new(turnstile_bin())
        .args(["instances", "--server", base, "--token-file"])
        .arg(&file)
        .args(args)
        .output()
        .expect("run turnstile instances");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_instances_command_works_through_a_running_server() {
    let tokens = tokens();
    let (_plugins, mut server) = console_server(&tokens);
    let base = server.base();
    let summary = run_scenario(Sdk::Mcp1, &format!("submit-invoice:{ALICE}"), &mut server);
    let handle = summary["handle"].as_str().unwrap().to_owned();
    let cli = |args: &[&str]| instances_cli(&base, OPERATOR, args);

    let listed = cli(&["--json", "list", "--state", "review"]).unwrap();
    let lines: Vec<Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{listed}");
    assert!(
        lines[0]["key"]
            .as_str()
            .unwrap()
            .starts_with(&format!("handle/{handle}@"))
    );

    let shown: Value = serde_json::from_str(&cli(&["--json", "show", &handle]).unwrap()).unwrap();
    assert_eq!(shown["state"], "review");
    assert_eq!(shown["audit"][0]["by"], "tool:invoice.submit");

    let reset = cli(&["reset", &handle]).unwrap();
    assert!(reset.contains("now in state draft"), "{reset}");
    // The trail names the operator whose token asked for it.
    let shown: Value = serde_json::from_str(&cli(&["--json", "show", &handle]).unwrap()).unwrap();
    assert_eq!(
        shown["audit"].as_array().unwrap().last().unwrap()["principal"],
        "token:ops"
    );

    let deleted = cli(&["delete", &handle]).unwrap();
    assert!(deleted.starts_with("deleted handle/"), "{deleted}");
    // The console's delete left a tombstone naming the operator, read through its API...
    let gone: Value = serde_json::from_str(&cli(&["--json", "show", &handle]).unwrap()).unwrap();
    assert_eq!(
        (
            &gone["deleted"]["by"],
            &gone["deleted"]["kind"],
            &gone["state"],
            &gone["version"]
        ),
        (
            &json!("token:ops"),
            &json!("console"),
            &json!("draft"),
            &json!(2)
        ),
        "{gone}"
    );
    let text = cli(&["show", &handle]).unwrap();
    assert!(
        text.contains(" by token:ops (console) in state draft (version 2)"),
        "{text}"
    );
    let (status, api) = get(
        &format!("{base}/console/api/instance?id={handle}"),
        Some(OPERATOR),
    )
    .await;
    assert_eq!(status, 200, "{api}");
    let api: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(api["deleted"], gone["deleted"]);
    // ... and on the instance's page.
    let (status, page) = get(
        &format!("{base}/console/instance?id={handle}"),
        Some(OPERATOR),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("instance-deleted") && page.contains("token:ops"),
        "{page}"
    );

    // A client's token is refused, saying why.
    let refused = instances_cli(&base, ALICE, &["list"]).unwrap_err();
    assert!(refused.contains("not an operator"), "{refused}");
}

/// Reads the `counts` events of an open `/console/api/live` stream until one satisfies
/// `wanted`, within `within`; that one, or what was last seen.
async fn counts_until(
    live: &mut reqwest::Response,
    buffer: &mut String,
    within: Duration,
    wanted: impl Fn(&Value) -> bool,
) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + within;
    let mut last = Value::Null;
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if !event.lines().any(|line| line == "event: counts") {
                continue;
            }
            let data = event
                .lines()
                .find_map(|line| line.strip_prefix("data: "))
                .ok_or_else(|| format!("a counts event without data: {event:?}"))?;
            last = serde_json::from_str(data).map_err(|e| format!("{e}: {data}"))?;
            if wanted(&last) {
                return Ok(last);
            }
        }
        match tokio::time::timeout_at(deadline, live.chunk()).await {
            Ok(Ok(Some(chunk))) => buffer.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None)) => return Err(format!("the stream ended; last counts {last}")),
            Ok(Err(error)) => return Err(format!("the stream failed: {error}")),
            Err(_) => return Err(format!("not within {within:?}; last counts {last}")),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn live_counts_follow_a_transition_made_on_another_server_sharing_the_store() {
    let redis = common::reachable_redis_url();
    let namespace = format!("console_{}", uuid::Uuid::new_v4().simple());
    let tokens = tokens();
    let plugins = common::PluginDir::with(&["invoice"]);
    let flags = [
        "--state-handle-key",
        "handle",
        "--auth-token-file",
        tokens.arg(),
    ];
    let watching = common::Server::sharing(plugins.path(), &redis, &namespace, &flags);
    let mut moving = common::Server::sharing(plugins.path(), &redis, &namespace, &flags);
    let mut live = reqwest::Client::new()
        .get(format!("{}/console/api/live", watching.base()))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(live.status().as_u16(), 200);
    assert_eq!(
        live.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut buffer = String::new();
    let review = |counts: &Value| counts["invoice"]["states"]["review"].as_u64().unwrap_or(0);
    counts_until(&mut live, &mut buffer, Duration::from_secs(10), |c| {
        c["invoice"]["total"] == 0
    })
    .await
    .unwrap();

    // The other server mints and moves an invoice; this one's stream tells of it.
    run_scenario(Sdk::Mcp1, &format!("submit-invoice:{ALICE}"), &mut moving);
    counts_until(&mut live, &mut buffer, Duration::from_secs(10), |c| {
        review(c) == 1
    })
    .await
    .unwrap();
}

/// The states with `class` (`active`, `contains-active`) in the one SVG in `page`, in
/// document order.
fn lit_in(page: &str, class: &str) -> Vec<String> {
    let start = page.find("<svg").expect("a diagram on the page");
    let end = page[start..].find("</svg>").expect("the diagram ends") + start + "</svg>".len();
    let doc = roxmltree::Document::parse(&page[start..end]).expect("the diagram is XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("g") && n.attribute("data-state").is_some())
        .filter(|n| {
            n.attribute("class")
                .is_some_and(|c| c.split(' ').any(|t| t == class))
        })
        .map(|n| n.attribute("data-state").unwrap().to_owned())
        .collect()
}

/// An order started by a client is in its parallel `work` state, one state in each region: its
/// instance page lights both, the diagram API lights what it is given (states, or the state
/// value), and the workflow's counts count it in each.
#[tokio::test(flavor = "multi_thread")]
async fn an_instance_in_a_parallel_state_has_every_region_lit() {
    let plugins = common::PluginDir::with(&[]);
    plugins.add_c_fixture("order");
    let tokens = tokens();
    let server = common::Server::http(plugins.path(), &["--auth-token-file", tokens.arg()]);
    let base = server.base();
    let client = common::Client::http_as(&server.url, ALICE).await;
    let started = client.call("order.start", serde_json::json!({})).await;
    assert_ne!(started.is_error, Some(true), "{started:?}");

    let (status, listed) = get(
        &format!("{base}/console/api/instances?workflow=order"),
        Some(OPERATOR),
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let instance = &listed["instances"][0];
    assert_eq!(
        instance["state"],
        serde_json::json!({"work": {"shipping": "packing", "billing": "unpaid"}})
    );
    let key = instance["key"].as_str().unwrap();

    let both = ["work.shipping.packing", "work.billing.unpaid"];
    let around = ["work", "work.shipping", "work.billing"];
    let page_url = format!(
        "{base}/console/instance?{}",
        serde_urlencoded::to_string([("id", key)]).unwrap()
    );
    let (status, page) = get(&page_url, Some(OPERATOR)).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(lit_in(&page, "active"), both, "the instance page");
    assert_eq!(lit_in(&page, "contains-active"), around);

    let diagram = format!("{base}/console/api/workflows/order/diagram.svg");
    let value = instance["state"].to_string();
    for query in [
        vec![("highlight", both[0]), ("highlight", both[1])],
        vec![("highlight", value.as_str())],
    ] {
        let url = format!("{diagram}?{}", serde_urlencoded::to_string(&query).unwrap());
        let (status, svg) = get(&url, Some(OPERATOR)).await;
        assert_eq!(status, 200, "{query:?}: {svg}");
        assert_eq!(lit_in(&svg, "active"), both, "{query:?}");
    }
    let (status, refused) = get(&format!("{diagram}?highlight=work.nowhere"), Some(OPERATOR)).await;
    assert_eq!(status, 404);
    assert!(refused.contains("no state `work.nowhere`"), "{refused}");

    let (_, workflows) = get(&format!("{base}/console/api/workflows"), Some(OPERATOR)).await;
    let workflows: Value = serde_json::from_str(&workflows).unwrap();
    let counts = &workflows["workflows"][0]["counts"];
    for state in both.iter().chain(&around) {
        assert_eq!(counts[state], 1, "{state}: {counts}");
    }
}

/// A 2026-07-28 `tools/call` of `tool` by Alice (with `meta` as its `_meta`): its result.
async fn call_as_alice(url: &str, tool: &str, arguments: Value, meta: Value) -> Value {
    let params = json!({"name": tool, "arguments": arguments, "_meta": meta});
    let answer = common::post_sessionless(url, 1, "tools/call", params)
        .bearer_auth(ALICE)
        .send()
        .await
        .expect("the server answers");
    let body = answer.text().await.expect("a body");
    common::result_of(&body, 1, tool)
}

/// A step running as a task is shown running in the console: the instance list's status, the
/// instance page, and the API say which tool runs and under which task; once it ended, none.
#[tokio::test]
async fn a_step_running_as_a_task_is_shown_running() {
    let tokens = tokens();
    let plugins = common::PluginDir::with(&["migration"]);
    let server = common::Server::http_with_env(
        plugins.path(),
        &["--auth-token-file", tokens.arg()],
        &[("TURNSTILE_PLUGIN_MIGRATION_APPLY_MS", "4000")],
    );
    let (url, base) = (&server.url, server.base());
    let dry_run = call_as_alice(url, "migration.dry_run", json!({}), json!({})).await;
    let handle = dry_run["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    let backup = json!({"handle": handle});
    let backed_up = call_as_alice(url, "migration.backup", backup, json!({})).await;
    assert_ne!(backed_up["isError"], true, "{backed_up}");
    let apply = json!({"handle": handle, "confirm": true});
    let created = call_as_alice(url, "migration.apply", apply, common::declaring_tasks()).await;
    let task_id = created["taskId"].as_str().expect("a task").to_owned();

    let (status, listed) = get(
        &format!("{base}/console/api/instances?workflow=migration"),
        Some(OPERATOR),
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let instance = &listed["instances"][0];
    assert_eq!(instance["running"]["tool"], "migration.apply", "{listed}");
    assert_eq!(instance["running"]["task_id"], task_id.as_str(), "{listed}");
    let key = instance["key"].as_str().unwrap().to_owned();

    let (_, list_page) = get(&format!("{base}/console/instances"), Some(OPERATOR)).await;
    assert!(list_page.contains("running migration.apply"), "{list_page}");
    let page_url = format!(
        "{base}/console/instance?{}",
        serde_urlencoded::to_string([("id", key.as_str())]).unwrap()
    );
    let (status, page) = get(&page_url, Some(OPERATOR)).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("id=\"instance-running\""), "{page}");
    assert!(page.contains(&task_id), "{page}");
    // An operator's reset or delete would land under the running step: refused, naming it.
    for act in ["reset", "delete"] {
        let acted = reqwest::Client::new()
            .post(format!(
                "{base}/console/api/instance/{act}?{}",
                serde_urlencoded::to_string([("id", key.as_str())]).unwrap()
            ))
            .bearer_auth(OPERATOR)
            .send()
            .await
            .expect("the server answers");
        assert_eq!(acted.status().as_u16(), 409, "{act}");
        let said = acted.text().await.unwrap();
        assert!(
            said.contains(&format!("as task {task_id}")),
            "{act}: {said}"
        );
    }

    // Once it ended, nothing runs.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, listed) = get(
            &format!("{base}/console/api/instances?workflow=migration"),
            Some(OPERATOR),
        )
        .await;
        let listed: Value = serde_json::from_str(&listed).unwrap();
        let instance = &listed["instances"][0];
        if instance.get("running").is_none() {
            assert_eq!(instance["state"], "applied", "{listed}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, page) = get(&page_url, Some(OPERATOR)).await;
    assert!(!page.contains("id=\"instance-running\""), "{page}");
}

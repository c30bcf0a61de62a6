//! `--fanout`: how long one transition takes to reach every session watching the instance, and
//! whether each hears it exactly once.
//!
//! Needs handle mode and sessions (a 2025 revision): N sessions subscribe to ONE instance by
//! touching it (`tools/list` naming its handle in `_meta`), the way `--race` shares one. The first
//! session mints the instance; every other one touches it and must see the same menu. Then the
//! first session fires transitions, one round at a time: it calls a listed tool that is not
//! read-only (avoiding the one it called last and those that led, at once or by force, to a
//! finished workflow, so the rounds alternate as the workflow allows), lists again, and a changed menu is a transition.
//! Each round measures, from sending the call, its result and the first, median, p99 and last
//! `list_changed` over the N sessions, and judges each session on its own: it must have heard
//! this transition exactly once (within `--notify-timeout`, then a quiet moment for a second
//! one). When the workflow is finished, the next round starts on a new instance.
//!
//! Each session holds its GET event stream open for the whole run: one connection per session on
//! both sides, so large N needs a raised `ulimit -n`.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use futures_util::{StreamExt, stream};
use rand::{SeedableRng, rngs::StdRng, seq::IndexedRandom};
use tokio::time::Instant;

use super::{
    Shared,
    contract::{self, CallIntent},
    conversation::{Conversation, Minted},
    report::FanoutRound,
    schema_args,
    tools::{Menu, Outcome, ToolInfo, menus_differ},
};

/// Sessions being opened (or closed) at once: enough to open thousands in seconds, few enough
/// not to look like a flood to the server's accept queue.
const CONNECT_CONCURRENCY: usize = 64;

/// After every session heard a transition (or the timeout passed), how long to listen for a
/// second `list_changed` for it.
const QUIET: Duration = Duration::from_millis(300);

/// Calls in a row that may move nothing before the driver gives up on the instance and mints a
/// new one (tools that fail on generated arguments, or that only read).
const MISSES_BEFORE_NEW_INSTANCE: usize = 8;

/// Times in a row the sessions may fail to share a new instance before the run gives up.
const SUBSCRIPTION_ATTEMPTS: usize = 3;

/// Runs fan-out rounds until the run stops or `--iterations` transitions were fired.
pub async fn run(shared: Arc<Shared>) {
    let mut sessions = open_all(&shared).await;
    if sessions.is_empty() {
        return;
    }
    let mut rng = StdRng::from_rng(&mut rand::rng());
    let mut driver = Driver::default();
    let mut rounds = 0u64;
    let mut misses = 0;
    let mut failed_subscriptions = 0;
    while !shared.should_stop(rounds) {
        let Some(menu) = driver.menu.take() else {
            driver.menu = subscribe_all(&mut sessions, &shared, &mut rng).await;
            driver.last_tool = None;
            misses = 0;
            if driver.menu.is_none() {
                failed_subscriptions += 1;
                if failed_subscriptions == SUBSCRIPTION_ATTEMPTS {
                    // Counted as errors already: the run ends with exit code 2, not a hang.
                    break;
                }
                shared.back_off().await;
            } else {
                failed_subscriptions = 0;
            }
            continue;
        };
        let Some(tool) = driver.choose(&menu, &mut rng) else {
            // The workflow is finished: fan out from a new instance.
            continue;
        };
        match fire(&mut sessions, &shared, &menu, &tool, rounds + 1, &mut rng).await {
            Fired::Transition(after) => {
                rounds += 1;
                misses = 0;
                if driver
                    .choosable(&after)
                    .iter()
                    .all(|next| driver.dead_ends.contains(&next.name))
                {
                    driver.dead_ends.insert(tool.name.clone());
                }
                driver.last_tool = Some(tool.name.clone());
                driver.menu = Some(after);
            }
            Fired::Nothing(after) => {
                misses += 1;
                driver.menu = (misses < MISSES_BEFORE_NEW_INSTANCE).then_some(after);
            }
            Fired::Failed => driver.menu = None,
        }
    }
    shared.client_done();
    stream::iter(sessions.into_iter().map(Conversation::close))
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// What the transitions so far taught about the workflow.
#[derive(Default)]
struct Driver {
    /// The shared instance's menu, once it is minted and every session touched it.
    menu: Option<Menu>,
    last_tool: Option<String>,
    /// Tools after which nothing was listed but read-only tools or other dead ends (by name):
    /// avoided while others are listed, so that rounds cycle where the workflow can cycle.
    dead_ends: BTreeSet<String>,
}

impl Driver {
    fn choosable(&self, menu: &Menu) -> Vec<ToolInfo> {
        menu.iter()
            .filter(|tool| !tool.read_only)
            .cloned()
            .collect()
    }

    /// A tool that may move the instance on: one that keeps the workflow going and differs from
    /// the last round's if there is one, else any that is not read-only.
    fn choose(&self, menu: &Menu, rng: &mut StdRng) -> Option<ToolInfo> {
        let movers = self.choosable(menu);
        let preferred: Vec<&ToolInfo> = movers
            .iter()
            .filter(|tool| !self.dead_ends.contains(&tool.name))
            .filter(|tool| self.last_tool.as_ref() != Some(&tool.name))
            .collect();
        let fallback: Vec<&ToolInfo> = movers
            .iter()
            .filter(|tool| !self.dead_ends.contains(&tool.name))
            .collect();
        let pool = [preferred, fallback, movers.iter().collect()]
            .into_iter()
            .find(|pool| !pool.is_empty())?;
        pool.choose(rng).map(|tool| (*tool).clone())
    }
}

/// Opens `--sessions` sessions, `CONNECT_CONCURRENCY` at a time; failures are counted.
async fn open_all(shared: &Arc<Shared>) -> Vec<Conversation> {
    let opened: Vec<_> = stream::iter(0..shared.settings.sessions)
        .map(|_| Conversation::open(shared))
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    opened
        .into_iter()
        .filter_map(|opened| {
            opened
                .map_err(|error| {
                    shared
                        .stats
                        .error(format!("{} (too few file descriptors?)", error.kind()))
                })
                .ok()
        })
        .collect()
}

/// The first session mints a new instance; every other one touches it and must see the same
/// menu (a session that touched it is subscribed to it). Returns the instance's menu.
async fn subscribe_all(
    sessions: &mut [Conversation],
    shared: &Arc<Shared>,
    rng: &mut StdRng,
) -> Option<Menu> {
    let (leader, others) = sessions.split_first_mut()?;
    let heard_before = leader.heard();
    let Minted { before, after, .. } = leader.mint(rng, "setup: fanout").await?;
    if menus_differ(&before, &after) {
        // Minting was a transition the leader alone was subscribed to: let its notice arrive
        // now, so that it cannot be taken for one of the first round's.
        leader
            .notices()
            .wait_for(heard_before + 1, shared.settings.notify_timeout)
            .await;
    }
    let handle = leader.handle.clone();
    for other in others.iter_mut() {
        other.handle = handle.clone();
    }
    let touched: Vec<Option<Menu>> = stream::iter(others.iter_mut())
        .map(Conversation::list)
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    let differing = touched
        .iter()
        .filter(|menu| menu.as_ref().is_some_and(|menu| menus_differ(menu, &after)))
        .count();
    if differing > 0 {
        shared.stats.error(format!(
            "setup: fanout: a session touching {} saw another menu than its minter",
            handle.as_deref().unwrap_or("-")
        ));
    }
    if touched.iter().any(Option::is_none) || differing > 0 {
        return None;
    }
    Some(after)
}

/// What one call of the driving session did.
enum Fired {
    /// The menu changed: a transition, measured and judged.
    Transition(Menu),
    /// An answer, but the menu stayed (a tool error, or a call that moves nothing).
    Nothing(Menu),
    /// No answer, or no menu after it (counted as errors).
    Failed,
}

/// One round: the first session calls `tool` on the shared instance; if that was a transition,
/// every session must hear it once.
async fn fire(
    sessions: &mut [Conversation],
    shared: &Arc<Shared>,
    menu: &Menu,
    tool: &ToolInfo,
    round: u64,
    rng: &mut StdRng,
) -> Fired {
    let handle_key = shared.settings.handle_key.as_deref();
    let arguments = schema_args::valid(&tool.input_schema, handle_key, rng);
    let before: Vec<u64> = sessions.iter().map(Conversation::heard).collect();
    let heard = shared.endpoint.heard();
    let all_heard = heard.heard() + sessions.len() as u64;
    let sent = Instant::now();
    let Some((outcome, _)) = sessions[0]
        .call(&tool.name, arguments, CallIntent::Listed, true)
        .await
    else {
        return Fired::Failed;
    };
    let result = sent.elapsed();
    let Some(after) = sessions[0].list().await else {
        return Fired::Failed;
    };
    if !matches!(outcome, Outcome::Ok { .. }) || !menus_differ(menu, &after) {
        return Fired::Nothing(after);
    }
    let counted = shared.stats.transition();
    shared.stats.iteration();
    // Every session's notice, counted together (or the timeout: then some missed it).
    heard
        .wait_for(all_heard, shared.settings.notify_timeout)
        .await;
    let arrivals: Vec<Option<std::time::Instant>> = sessions
        .iter()
        .zip(&before)
        .map(|(session, before)| {
            (session.heard() > *before)
                .then(|| session.notices().last())
                .flatten()
        })
        .collect();
    tokio::time::sleep(QUIET).await;
    let mut delays: Vec<Duration> = arrivals
        .iter()
        .flatten()
        .map(|at| Instant::from_std(*at).saturating_duration_since(sent))
        .collect();
    for delay in delays.iter().filter(|_| counted) {
        shared.stats.notification_delay(*delay);
    }
    delays.sort();
    let mut measured = FanoutRound::new(round, &tool.name, result, &delays, sessions.len());
    for (session, before) in sessions.iter().zip(&before) {
        let heard = session.heard() - before;
        match heard {
            0 => measured.missing += 1,
            1 => {}
            _ => measured.extra += 1,
        }
        if let Some(violation) = contract::judge_notifications(1, heard) {
            let id = session.session_id().unwrap_or("-").to_string();
            shared.violations.record(violation, || {
                format!(
                    "fan-out round {round} ({}): session {id} heard {heard} list_changed for one \
                     transition",
                    tool.name
                )
            });
        }
    }
    shared.record_fanout_round(measured);
    Fired::Transition(after)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, read_only: bool) -> ToolInfo {
        ToolInfo {
            name: name.into(),
            description: None,
            input_schema: json!({"type": "object"}),
            read_only,
        }
    }

    #[test]
    fn the_driver_keeps_the_workflow_going_and_alternates() {
        let mut rng = StdRng::seed_from_u64(1);
        let review = vec![
            tool("approve", false),
            tool("reject", false),
            tool("status", true),
        ];
        let mut driver = Driver {
            dead_ends: ["approve".to_string()].into(),
            ..Driver::default()
        };
        for _ in 0..20 {
            assert_eq!(driver.choose(&review, &mut rng).unwrap().name, "reject");
        }
        // Forced: the only tool that moves anything is a dead end, or the last one called.
        driver.last_tool = Some("reject".into());
        let approved = vec![tool("discharge", false), tool("status", true)];
        driver.dead_ends.insert("discharge".into());
        assert_eq!(
            driver.choose(&approved, &mut rng).unwrap().name,
            "discharge"
        );
        let draft = vec![tool("reject", false)];
        assert_eq!(driver.choose(&draft, &mut rng).unwrap().name, "reject");
        assert!(
            driver
                .choose(&vec![tool("status", true)], &mut rng)
                .is_none()
        );
    }
}

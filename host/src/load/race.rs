//! `--race`: every client calls the same listed tool on the same instance at the same moment.
//! Calls on one instance are serialized, so of the racing calls that move it on exactly one may
//! win (the others find the tool no longer allowed and are refused); and since every racing
//! session touched the instance, every one of them must hear that one transition once.
//!
//! Needs handle mode: it is how several sessions name one instance. The first client mints the
//! instance; the others touch it by listing with its handle before the first race.

use std::sync::Arc;

use futures_util::future::join_all;
use rand::{SeedableRng, rngs::StdRng, seq::IndexedRandom};
use tokio::time::Instant;

use super::{
    Shared,
    contract::{self, CallIntent},
    conversation::{Conversation, Minted},
    schema_args,
    tools::{Menu, Outcome, menus_differ},
};

/// Runs races until the run stops or `--iterations` races were run.
pub async fn run(shared: Arc<Shared>) {
    let mut conversations = Vec::with_capacity(shared.settings.sessions);
    for _ in 0..shared.settings.sessions {
        match Conversation::open(&shared).await {
            Ok(conversation) => conversations.push(conversation),
            Err(error) => shared.stats.error(error.kind()),
        }
    }
    if conversations.is_empty() {
        return;
    }
    let mut rng = StdRng::from_rng(&mut rand::rng());
    let mut races = 0u64;
    let mut menu: Option<Menu> = None;
    while !shared.should_stop(races) {
        let Some(current) = menu.take() else {
            menu = mint(&mut conversations, &shared, &mut rng).await;
            if menu.is_none() {
                shared.back_off().await;
            }
            continue;
        };
        let movers: Vec<_> = current.iter().filter(|tool| !tool.read_only).collect();
        let Some(tool) = movers.choose(&mut rng) else {
            // The workflow is done: race on a new instance.
            continue;
        };
        let handle_key = shared.settings.handle_key.as_deref();
        let arguments = schema_args::valid(&tool.input_schema, handle_key, &mut rng);
        let started = Instant::now();
        let outcomes = join_all(conversations.iter_mut().map(|conversation| {
            conversation.call(
                &tool.name,
                arguments.clone(),
                CallIntent::ListedRacing,
                true,
            )
        }))
        .await;
        races += 1;
        shared.stats.iteration();
        let winners = outcomes
            .iter()
            .filter(|outcome| matches!(outcome, Some((Outcome::Ok { .. }, _))))
            .count();
        let Some(after) = conversations[0].list().await else {
            continue;
        };
        let moved = menus_differ(&current, &after);
        if let Some(violation) = contract::judge_race(winners, moved) {
            let racers = conversations.len();
            let handle = conversations[0].handle.clone().unwrap_or_default();
            shared.violations.record(violation, || {
                format!(
                    "{}: {winners} of {racers} racing calls won on {handle}",
                    tool.name
                )
            });
        }
        if moved {
            let counted = shared.stats.transition();
            // With sessions, every racer touched the instance and is subscribed; without (2026-07-28)
            // only a winner hears it, on its own call's stream.
            let subscribed: Vec<&mut Conversation> = if shared.endpoint.protocol().has_sessions() {
                conversations.iter_mut().collect()
            } else {
                conversations
                    .iter_mut()
                    .zip(&outcomes)
                    .filter(|(_, outcome)| matches!(outcome, Some((Outcome::Ok { .. }, _))))
                    .map(|(conversation, _)| conversation)
                    .collect()
            };
            join_all(
                subscribed
                    .into_iter()
                    .map(|conversation| conversation.subscribed_transition(Some(started), counted)),
            )
            .await;
        }
        menu = Some(after);
    }
    shared.client_done();
    join_all(conversations.into_iter().map(Conversation::finish)).await;
}

/// The first client starts a new instance; every other one touches it. Returns its menu.
async fn mint(
    conversations: &mut [Conversation],
    shared: &Shared,
    rng: &mut StdRng,
) -> Option<Menu> {
    let (leader, others) = conversations.split_first_mut()?;
    let Minted { before, after, due } = leader.mint(rng, "race").await?;
    if menus_differ(&before, &after) {
        let counted = shared.stats.transition();
        leader.subscribed_transition(Some(due), counted).await;
    }
    for other in others.iter_mut() {
        other.handle = leader.handle.clone();
        other.list().await?;
    }
    Some(after)
}

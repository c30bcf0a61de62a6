//! The connection a [`super::RedisStore`] talks through, to one Redis server or to a Redis
//! Cluster, and the change feeds it opens.
//!
//! This module owns connecting (with the store's bounds) and the pub/sub flavour each kind
//! needs: `SUBSCRIBE`/`PUBLISH` on one server; sharded `SSUBSCRIBE`/`SPUBLISH` on a cluster,
//! so a change travels only to the master owning the instance's slot and the servers
//! subscribed there. It must not know key names (`layout.rs`) or what the commands mean
//! (`mod.rs`).
//!
//! Outages: on one server, one multiplexed connection under [`ConnectionManager`], which
//! reconnects in the background after the connection drops. On a cluster, redis-rs's
//! [`ClusterConnection`], which keeps a connection per node, follows `MOVED`/`ASK` redirects and
//! refreshes the slot map after a failover. Every operation also runs under the store's
//! `op_timeout` (in `mod.rs`), so a caller waiting on a reconnect gets
//! [`StoreError::Unavailable`] instead of hanging.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::{
    Cmd, Pipeline, ProtocolVersion, PushInfo, PushKind, RedisError, RedisFuture, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClientBuilder,
    cluster_async::ClusterConnection,
    cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo},
};

use super::{bounded, layout::Layout, unavailable};
use crate::store::{ChangeFeed, FeedSubscriptions, StoreError, StoreOptions};

/// A connection to one Redis server or to a cluster; cheap to clone (both multiplex).
#[derive(Clone)]
pub enum Link {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// How to open a change feed's own connection.
#[derive(Clone)]
pub enum FeedOpener {
    Single(redis::Client),
    Cluster(Vec<String>),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Single(con) => con.req_packed_command(cmd),
            Link::Cluster(con) => con.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Single(con) => con.req_packed_commands(pipeline, offset, count),
            Link::Cluster(con) => con.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(con) => con.get_db(),
            Link::Cluster(con) => con.get_db(),
        }
    }
}

impl Link {
    /// Sends `cmd` to every master of a cluster (on one server, to the server), for a question
    /// no key routes: each master's answer by node address (an error answer as
    /// [`Value::ServerError`]), or as `policy` combines them. Fails when a master cannot be
    /// reached.
    pub async fn on_every_master(
        &self,
        cmd: Cmd,
        policy: Option<ResponsePolicy>,
    ) -> Result<Value, RedisError> {
        match self {
            Link::Single(con) => cmd.query_async(&mut con.clone()).await,
            Link::Cluster(con) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, policy));
                con.clone().route_command(cmd, routing).await
            }
        }
    }
}

/// Connects to the one server `url` names, within `connect_timeout + op_timeout`.
pub async fn single(
    name: &str,
    url: &str,
    options: &StoreOptions,
) -> Result<(Link, FeedOpener), StoreError> {
    let client = redis::Client::open(url)
        .map_err(|e| StoreError::Config(format!("{name}: bad Redis URL: {e}")))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connect_timeout))
        .set_response_timeout(Some(options.op_timeout))
        // Few, short retries per reconnect: a request that finds the connection down waits
        // for that reconnect, and a failed reconnect is retried on the next request anyway.
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500));
    let con = within(
        name,
        options,
        ConnectionManager::new_with_config(client.clone(), config),
    )
    .await?;
    Ok((Link::Single(con), FeedOpener::Single(client)))
}

/// Connects to the cluster whose nodes (any of them: the rest are discovered) `nodes` names.
pub async fn cluster(
    name: &str,
    nodes: Vec<String>,
    options: &StoreOptions,
) -> Result<(Link, FeedOpener), StoreError> {
    let client = cluster_builder(&nodes, options)
        .build()
        .map_err(|e| StoreError::Config(format!("{name}: bad Redis Cluster URL: {e}")))?;
    let con = within(name, options, client.get_async_connection()).await?;
    Ok((Link::Cluster(con), FeedOpener::Cluster(nodes)))
}

fn cluster_builder(nodes: &[String], options: &StoreOptions) -> ClusterClientBuilder {
    ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(options.connect_timeout)
        .response_timeout(options.op_timeout)
        // Redirects during a failover or a resharding are retried; a few, briefly, as on one
        // server: the caller's bound is `op_timeout` either way.
        .retries(3)
        .min_retry_wait(20)
        .max_retry_wait(500)
}

/// `connecting`, bounded by `connect_timeout + op_timeout`.
async fn within<T>(
    name: &str,
    options: &StoreOptions,
    connecting: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, StoreError> {
    let bound = options.connect_timeout + options.op_timeout;
    match tokio::time::timeout(bound, connecting).await {
        Ok(Ok(con)) => Ok(con),
        Ok(Err(e)) => Err(unavailable(name, "connect", &e).when_connecting()),
        Err(_) => Err(StoreError::Unavailable(format!(
            "{name}: connect timed out after {bound:?}"
        ))),
    }
}

/// The command that announces a change on `layout`'s channels.
pub fn publish_command(layout: &Layout) -> &'static str {
    if layout.is_cluster() {
        "SPUBLISH"
    } else {
        "PUBLISH"
    }
}

/// Opens a change feed on a connection of its own.
///
/// On one server, the feed's stream ends when that connection drops (pub/sub messages sent
/// meanwhile are lost, as Redis never queues them): the caller opens another and watches again.
/// On a cluster the feed keeps a connection per node, and redis-rs would subscribe again by
/// itself after one drops, going on as if nothing was lost; so the stream ends there too, at
/// the `Disconnection` push redis-rs sends for a dropped node connection (RESP3), or when a
/// node unsubscribes the feed from a channel whose slot moved away (redis-rs then forgets the
/// channel). The caller then does what it does on one server: a new feed, every key watched
/// again, and each checked for what it missed (`actors/relay.rs`).
pub async fn open_feed(
    opener: &FeedOpener,
    layout: &Layout,
    name: &str,
    options: &StoreOptions,
) -> Result<ChangeFeed, StoreError> {
    let op_timeout = options.op_timeout;
    match opener {
        FeedOpener::Single(client) => {
            let client = client.clone();
            let pubsub = bounded(name, op_timeout, "subscribe", async move {
                client.get_async_pubsub().await
            })
            .await?;
            let (sink, stream) = pubsub.split();
            let layout_of_stream = layout.clone();
            let changes = stream.filter_map(move |msg| {
                let key = layout_of_stream
                    .key_of_channel(msg.get_channel_name())
                    .map(str::to_owned);
                let origin = msg.get_payload::<String>().ok();
                async move { key.zip(origin).map(|(key, origin)| (origin, key)) }
            });
            Ok(ChangeFeed {
                changes: Box::pin(changes),
                subscriptions: Box::new(Subscriptions {
                    sink: Sink::Single(sink),
                    layout: layout.clone(),
                    name: name.to_owned(),
                    op_timeout,
                }),
            })
        }
        FeedOpener::Cluster(nodes) => {
            let (pushes, received) = tokio::sync::mpsc::unbounded_channel();
            let client = cluster_builder(nodes, options)
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(pushes)
                .build()
                .map_err(|e| unavailable(name, "subscribe", &e))?;
            let con = within(name, options, client.get_async_connection()).await?;
            let leaving = Leaving::default();
            let reading = (received, layout.clone(), leaving.clone());
            let changes = futures_util::stream::unfold(reading, |mut reading| async move {
                let (received, layout, leaving) = &mut reading;
                loop {
                    match cluster_push(layout, leaving, received.recv().await?) {
                        Push::Changed(change) => return Some((change, reading)),
                        Push::Other => {}
                        Push::Gap(why) => {
                            tracing::info!(
                                why,
                                "the change feed missed what a Redis Cluster node said meanwhile; \
                                 it ends, to be opened and checked again"
                            );
                            return None;
                        }
                    }
                }
            });
            Ok(ChangeFeed {
                changes: Box::pin(changes),
                subscriptions: Box::new(Subscriptions {
                    sink: Sink::Cluster(con, leaving),
                    layout: layout.clone(),
                    name: name.to_owned(),
                    op_timeout,
                }),
            })
        }
    }
}

/// The channels a cluster feed unsubscribed from itself, each with the confirmations still to
/// come: a confirmation of none of these is the server's own (the channel's slot moved away).
#[derive(Clone, Default)]
struct Leaving(Arc<Mutex<HashMap<String, usize>>>);

impl Leaving {
    fn add(&self, channel: &str) {
        *self.lock().entry(channel.to_owned()).or_default() += 1;
    }

    /// Takes one expected confirmation for `channel`, if one was expected.
    fn confirmed(&self, channel: &str) -> bool {
        let mut leaving = self.lock();
        let Some(left) = leaving.get_mut(channel) else {
            return false;
        };
        *left -= 1;
        if *left == 0 {
            leaving.remove(channel);
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What one push of a cluster feed's connections means to the feed.
#[derive(Debug, PartialEq)]
enum Push {
    /// A change announced: `(origin, key)`.
    Changed((String, String)),
    /// Nothing the feed needs (a subscription's confirmation, another kind of push).
    Other,
    /// The feed may have missed announcements, and redis-rs would hide it: a node's connection
    /// dropped (redis-rs connects again and subscribes again by itself, but what was announced
    /// meanwhile is lost), or the server unsubscribed the feed from a channel whose slot moved
    /// away (redis-rs then forgets the channel). Says which.
    Gap(&'static str),
}

/// Reads one push of a cluster feed's connections (see [`Push`]).
fn cluster_push(layout: &Layout, leaving: &Leaving, push: PushInfo) -> Push {
    let text = |value: &Value| redis::from_redis_value_ref::<String>(value).ok();
    match (push.kind, push.data.as_slice()) {
        (PushKind::SMessage, [channel, origin]) => text(channel)
            .zip(text(origin))
            .and_then(|(channel, origin)| {
                layout
                    .key_of_channel(&channel)
                    .map(|key| Push::Changed((origin, key.to_owned())))
            })
            .unwrap_or(Push::Other),
        (PushKind::Disconnection, _) => Push::Gap("a node's connection dropped"),
        (PushKind::SUnsubscribe, [channel, ..]) => match text(channel) {
            Some(channel) if !leaving.confirmed(&channel) => {
                Push::Gap("a node unsubscribed the feed from a channel whose slot moved")
            }
            _ => Push::Other,
        },
        _ => Push::Other,
    }
}

/// Where a feed's (un)subscriptions go.
enum Sink {
    Single(redis::aio::PubSubSink),
    /// The feed's own cluster connection, and the unsubscriptions it is yet to confirm.
    Cluster(ClusterConnection, Leaving),
}

/// The channels a feed listens to.
struct Subscriptions {
    sink: Sink,
    layout: Layout,
    name: String,
    op_timeout: Duration,
}

/// Most channels one `SUBSCRIBE` or `UNSUBSCRIBE` names: a burst of watches costs a round trip
/// per this many, and no command grows without bound.
const CHANNELS_PER_COMMAND: usize = 1024;

#[async_trait]
impl FeedSubscriptions for Subscriptions {
    async fn watch(&mut self, key: &str) -> Result<(), StoreError> {
        self.watch_many(&[key.to_owned()]).await
    }

    async fn unwatch(&mut self, key: &str) -> Result<(), StoreError> {
        self.unwatch_many(&[key.to_owned()]).await
    }

    async fn watch_many(&mut self, keys: &[String]) -> Result<(), StoreError> {
        for channels in channel_groups(&self.layout, keys) {
            let subscribing = async {
                match &mut self.sink {
                    Sink::Single(sink) => sink.subscribe(&channels).await,
                    Sink::Cluster(con, _) => con.ssubscribe(&channels).await,
                }
            };
            bounded(&self.name, self.op_timeout, "subscribe", subscribing).await?;
        }
        Ok(())
    }

    async fn unwatch_many(&mut self, keys: &[String]) -> Result<(), StoreError> {
        for channels in channel_groups(&self.layout, keys) {
            let unsubscribing = async {
                match &mut self.sink {
                    Sink::Single(sink) => sink.unsubscribe(&channels).await,
                    Sink::Cluster(con, leaving) => {
                        // Before asking: the confirmations may come before the answer.
                        for channel in &channels {
                            leaving.add(channel);
                        }
                        con.sunsubscribe(&channels).await
                    }
                }
            };
            bounded(&self.name, self.op_timeout, "unsubscribe", unsubscribing).await?;
        }
        Ok(())
    }
}

/// The change channels of `keys`, in groups one (un)subscribe command may name: at most
/// [`CHANNELS_PER_COMMAND`] each, and on a cluster all of one shard, because a sharded
/// command's channels must hash to one slot (on one server every key is of the one shard).
fn channel_groups(layout: &Layout, keys: &[String]) -> Vec<Vec<String>> {
    let mut by_shard: HashMap<&str, Vec<String>> = HashMap::new();
    for key in keys {
        by_shard
            .entry(layout.shard_of(key))
            .or_default()
            .push(layout.changed(key));
    }
    by_shard
        .into_values()
        .flat_map(|channels| {
            channels
                .chunks(CHANNELS_PER_COMMAND)
                .map(<[String]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(kind: PushKind, data: &[&str]) -> PushInfo {
        PushInfo {
            kind,
            data: data
                .iter()
                .map(|item| Value::BulkString(item.as_bytes().to_vec()))
                .collect(),
        }
    }

    /// A dropped node connection is a gap, whatever redis-rs does next; so is a channel the
    /// server dropped, while the feed's own unsubscription is only confirmed, once.
    #[test]
    fn a_cluster_feed_ends_where_it_may_have_missed_announcements() {
        let layout = Layout::cluster("ns");
        let leaving = Leaving::default();
        let channel = layout.changed("invoice-1");
        assert_eq!(
            cluster_push(
                &layout,
                &leaving,
                push(PushKind::SMessage, &[&channel, "east"])
            ),
            Push::Changed(("east".to_owned(), "invoice-1".to_owned()))
        );
        assert_eq!(
            cluster_push(&layout, &leaving, push(PushKind::SSubscribe, &[&channel])),
            Push::Other
        );
        assert!(matches!(
            cluster_push(&layout, &leaving, push(PushKind::Disconnection, &[])),
            Push::Gap(_)
        ));

        leaving.add(&channel);
        let confirmation = || push(PushKind::SUnsubscribe, &[&channel]);
        assert_eq!(cluster_push(&layout, &leaving, confirmation()), Push::Other);
        assert!(matches!(
            cluster_push(&layout, &leaving, confirmation()),
            Push::Gap(_)
        ));
    }

    /// A burst of watches is named in few commands: on one server every channel in chunks of
    /// [`CHANNELS_PER_COMMAND`]; on a cluster only channels of one shard together.
    #[test]
    fn watches_are_grouped_into_commands_one_server_or_one_slot_can_take() {
        let keys: Vec<String> = (0..2500).map(|n| format!("invoice-{n}")).collect();

        let single = channel_groups(&Layout::single("ns"), &keys);
        let mut sizes: Vec<usize> = single.iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [452, 1024, 1024]);

        let layout = Layout::cluster("ns");
        let groups = channel_groups(&layout, &keys);
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), keys.len());
        for group in &groups {
            assert!(group.len() <= CHANNELS_PER_COMMAND);
            let slots: std::collections::HashSet<u16> = group
                .iter()
                .map(|channel| {
                    let key = layout.key_of_channel(channel).expect("a change channel");
                    Layout::slot(layout.shard_of(key))
                })
                .collect();
            assert_eq!(slots.len(), 1, "one slot per command");
        }
        assert!(groups.len() < keys.len() / 10, "{} commands", groups.len());
    }
}

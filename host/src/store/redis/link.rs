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

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::{
    Cmd, Pipeline, ProtocolVersion, PushKind, RedisError, RedisFuture, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClientBuilder,
    cluster_async::ClusterConnection,
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
/// On a cluster, redis-rs subscribes again by itself after a node's connection drops or a slot
/// moves, so the stream goes on; messages sent meanwhile are lost the same way.
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
            let layout_of_stream = layout.clone();
            let changes = futures_util::stream::unfold(received, |mut received| async move {
                received.recv().await.map(|push| (push, received))
            })
            .filter_map(move |push| {
                let change = match (push.kind, push.data.as_slice()) {
                    (PushKind::SMessage, [channel, origin]) => {
                        redis::from_redis_value_ref::<String>(channel)
                            .ok()
                            .zip(redis::from_redis_value_ref::<String>(origin).ok())
                            .and_then(|(channel, origin)| {
                                layout_of_stream
                                    .key_of_channel(&channel)
                                    .map(|key| (origin, key.to_owned()))
                            })
                    }
                    _ => None,
                };
                async move { change }
            });
            Ok(ChangeFeed {
                changes: Box::pin(changes),
                subscriptions: Box::new(Subscriptions {
                    sink: Sink::Cluster(con),
                    layout: layout.clone(),
                    name: name.to_owned(),
                    op_timeout,
                }),
            })
        }
    }
}

/// Where a feed's (un)subscriptions go.
enum Sink {
    Single(redis::aio::PubSubSink),
    Cluster(ClusterConnection),
}

/// The channels a feed listens to.
struct Subscriptions {
    sink: Sink,
    layout: Layout,
    name: String,
    op_timeout: Duration,
}

#[async_trait]
impl FeedSubscriptions for Subscriptions {
    async fn watch(&mut self, key: &str) -> Result<(), StoreError> {
        let channel = self.layout.changed(key);
        let subscribing = async {
            match &mut self.sink {
                Sink::Single(sink) => sink.subscribe(channel).await,
                Sink::Cluster(con) => con.ssubscribe(channel).await,
            }
        };
        bounded(&self.name, self.op_timeout, "subscribe", subscribing).await
    }

    async fn unwatch(&mut self, key: &str) -> Result<(), StoreError> {
        let channel = self.layout.changed(key);
        let unsubscribing = async {
            match &mut self.sink {
                Sink::Single(sink) => sink.unsubscribe(channel).await,
                Sink::Cluster(con) => con.sunsubscribe(channel).await,
            }
        };
        bounded(&self.name, self.op_timeout, "unsubscribe", unsubscribing).await
    }
}

//! Several server processes sharing instances through Redis or PostgreSQL: a transition made on
//! one server reaches the sessions of the other (DESIGN behaviour 7), and only the servers whose
//! sessions watch the instance; each server gates on the state they share, not on a stale copy.
//! A change made while a server's feed does not listen to the instance yet (or again) is heard
//! there once it does.

mod common;

use common::{
    Client, PluginDir, PrivateRedis, Scrape, Server, handle_of, names, postgres_url,
    redis_cluster_url, redis_url,
};
use deadpool_postgres::tokio_postgres;
use serde_json::json;

fn node(plugins: &PluginDir, store: &str, namespace: &str) -> Server {
    Server::sharing(plugins.path(), store, namespace, &["--state-handle-key"])
}

#[tokio::test]
async fn a_transition_on_one_server_notifies_and_regates_the_other_on_redis() {
    a_transition_on_one_server_notifies_and_regates_the_other(&redis_url()).await;
}

#[tokio::test]
async fn a_transition_on_one_server_notifies_and_regates_the_other_on_postgres() {
    a_transition_on_one_server_notifies_and_regates_the_other(&postgres_url()).await;
}

async fn a_transition_on_one_server_notifies_and_regates_the_other(store: &str) {
    let plugins = PluginDir::with(&["invoice"]);
    let namespace = format!("multinode_{}", uuid::Uuid::new_v4().simple());
    let east = node(&plugins, store, &namespace);
    let west = node(&plugins, store, &namespace);
    let alice = Client::http(&east.url).await;
    let bob = Client::http(&west.url).await;

    let handle = handle_of(&alice.call("invoice.submit", json!({"amount": 12})).await);
    alice.changes.wait_for(1).await;

    // Bob, on the other server, sees the instance as Alice left it, and watches it.
    assert_eq!(
        bob.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.approve", "invoice.reject", "invoice.status"])
    );
    let approved = alice
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    // Once: the approval comes just after west began to listen, so west's check of the
    // instance and the approval's announcement may both see it.
    bob.changes.wait_for(1).await;
    bob.changes.stays_at(1).await;
    assert_eq!(
        bob.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.discharge", "invoice.status"])
    );
    // West gates on the shared state: approving again is refused there too.
    let again = bob.call("invoice.approve", json!({"handle": handle})).await;
    assert_eq!(
        again.structured_content.unwrap()["error"]["code"],
        "FORBIDDEN"
    );

    let discharged = bob
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    assert_ne!(discharged.is_error, Some(true), "{discharged:?}");
    alice.changes.wait_for(3).await;
    let status = alice
        .call("invoice.status", json!({"handle": handle}))
        .await;
    assert_eq!(status.structured_content.unwrap()["state"], "discharged");
}

#[tokio::test]
async fn a_transition_reaches_only_the_servers_watching_it_on_redis() {
    a_transition_reaches_only_the_servers_watching_it(&redis_url()).await;
}

/// On a cluster the announcement is sharded pub/sub: it goes to the master owning the
/// instance's slot, and from there to the one server subscribed.
#[tokio::test]
async fn a_transition_reaches_only_the_servers_watching_it_on_redis_cluster() {
    a_transition_reaches_only_the_servers_watching_it(&redis_cluster_url()).await;
}

/// Ten servers on one store; a session on one of them watches an instance that a session on
/// another moves. The change reaches the watching server, and none of the other eight: a
/// transition is delivered to the servers watching it, not to every server.
async fn a_transition_reaches_only_the_servers_watching_it(store: &str) {
    let plugins = PluginDir::with(&["invoice"]);
    let namespace = format!("multinode_{}", uuid::Uuid::new_v4().simple());
    let servers: Vec<Server> = (0..10).map(|_| node(&plugins, store, &namespace)).collect();
    let alice = Client::http(&servers[0].url).await;
    let bob = Client::http(&servers[7].url).await;
    let handle = handle_of(&alice.call("invoice.submit", json!({"amount": 12})).await);
    // Bob watches the instance from server 7.
    assert_eq!(
        bob.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.approve", "invoice.reject", "invoice.status"])
    );
    // Sessions on the other servers are busy with instances of their own.
    let mut others = Vec::new();
    for server in &servers[1..7] {
        let client = Client::http(&server.url).await;
        client.call("invoice.submit", json!({"amount": 1})).await;
        others.push(client);
    }
    let approved = alice
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    bob.changes.wait_for(1).await;
    let mut relayed = Vec::new();
    for server in &servers {
        relayed.push(
            Scrape::of(server)
                .await
                .value("turnstile_changes_relayed_total", &[]),
        );
    }
    // Server 0 made the change (its own announcement is not relayed); server 7 watches it.
    let mut expected = vec![0.0; 10];
    expected[7] = 1.0;
    assert_eq!(relayed, expected);
}

/// When the watching server began to watch the instance, in a test of the gap in its feed.
#[derive(Clone, Copy, PartialEq)]
enum Watched {
    /// Before the gap: its feed listened, was lost, and listens again.
    Before,
    /// During the gap: its feed listens to the instance only after the change was made, as it
    /// does when a change comes between a first watch and its `LISTEN`.
    During,
}

/// A change made on one server while the watching server's feed does not listen to the instance
/// is still heard there, once, when it does: once it listens, the relay checks whether the
/// instance moved on from what its watchers saw (the announcement made in the gap is lost). The
/// watching server connects as a user of its own, so that its feed's connection can be killed
/// and kept from coming back until the change is made: the gap is as long as the test wants,
/// and no delay hidden in the server is needed.
async fn a_transition_made_in_a_gap_of_the_feed_is_heard_once_it_listens(
    cut: FeedCut,
    watched: Watched,
) {
    let plugins = PluginDir::with(&["invoice"]);
    let namespace = format!("multinode_{}", uuid::Uuid::new_v4().simple());
    let east = node(&plugins, &cut.east_url(), &namespace);
    let west = node(&plugins, &cut.west_url(), &namespace);
    let alice = Client::http(&east.url).await;
    let bob = Client::http(&west.url).await;
    let before_the_gap = names(&["invoice.approve", "invoice.reject", "invoice.status"]);

    let handle = handle_of(&alice.call("invoice.submit", json!({"amount": 12})).await);
    let told = match watched {
        Watched::Before => {
            assert_eq!(
                bob.tool_names_with_meta(json!({"handle": handle})).await,
                before_the_gap
            );
            0
        }
        // West's feed listens to an instance of Bob's own, so that it has a connection to cut.
        Watched::During => {
            bob.call("invoice.submit", json!({"amount": 1})).await;
            bob.changes.wait_for(1).await;
            1
        }
    };
    cut.cut_when_listening().await;
    if watched == Watched::During {
        assert_eq!(
            bob.tool_names_with_meta(json!({"handle": handle})).await,
            before_the_gap
        );
    }
    let approved = alice
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    // Nobody on west heard the announcement.
    bob.changes.stays_at(told).await;

    cut.restore().await;
    bob.changes.wait_for(told + 1).await;
    bob.changes.stays_at(told + 1).await;
    assert_eq!(
        bob.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.discharge", "invoice.status"])
    );
    // Alice, on the server that made both moves, heard of each once: east's check of her
    // instance, once it listened, found nothing she had not seen.
    alice.changes.stays_at(2).await;

    drop((alice, bob, east, west));
    cut.close().await;
}

#[tokio::test]
async fn a_transition_made_while_the_feed_is_down_is_heard_once_it_is_back_on_postgres() {
    let cut = FeedCut::postgres().await;
    a_transition_made_in_a_gap_of_the_feed_is_heard_once_it_listens(cut, Watched::Before).await;
}

/// One Redis server.
#[tokio::test]
async fn a_transition_made_while_the_feed_is_down_is_heard_once_it_is_back_on_redis() {
    let cut = FeedCut::redis().await;
    a_transition_made_in_a_gap_of_the_feed_is_heard_once_it_listens(cut, Watched::Before).await;
}

/// A Redis Cluster: the master holding the instance's slot drops west's feed connection (as a
/// restart of that node would) and refuses it a new one while east moves the instance. redis-rs
/// would subscribe again by itself once the node lets it back, and nothing would tell west to
/// check; its feed ends at the drop instead, and the relay checks once it listens again.
#[tokio::test]
async fn a_transition_made_while_a_cluster_node_drops_the_feed_is_heard_once_it_is_back() {
    let cut = FeedCut::redis_cluster().await;
    a_transition_made_in_a_gap_of_the_feed_is_heard_once_it_listens(cut, Watched::Before).await;
}

/// The race seen once on PostgreSQL: a change made after a session began to watch, before its
/// server's `LISTEN` for the instance was in place.
#[tokio::test]
async fn a_transition_made_before_a_first_watch_listens_is_heard_on_postgres() {
    let cut = FeedCut::postgres().await;
    a_transition_made_in_a_gap_of_the_feed_is_heard_once_it_listens(cut, Watched::During).await;
}

#[tokio::test]
async fn a_transition_made_before_a_first_watch_listens_is_heard_on_redis() {
    let cut = FeedCut::redis().await;
    a_transition_made_in_a_gap_of_the_feed_is_heard_once_it_listens(cut, Watched::During).await;
}

/// A store where the watching server ("west") logs in as a user of its own, so that the test
/// can kill its feed's connection and refuse it a new one, while the other server ("east") goes
/// on as the tests' usual user.
enum FeedCut {
    /// The shared PostgreSQL, with a login role made for the test.
    Postgres {
        admin: tokio_postgres::Client,
        admin_url: String,
        role: String,
    },
    /// A private `redis-server`, with an ACL user for west.
    Redis {
        redis: PrivateRedis,
        admin: redis::aio::MultiplexedConnection,
    },
    /// The tests' Redis Cluster, with an ACL user of the test's own for west on every node (a
    /// cluster's users are each node's), cut on the one node its feed listens on.
    RedisCluster {
        url: String,
        /// A connection to each node, as the tests' usual user.
        nodes: Vec<redis::aio::MultiplexedConnection>,
        user: String,
    },
}

const WEST: &str = "west";
const WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl FeedCut {
    async fn postgres() -> FeedCut {
        let admin_url = common::reachable_postgres_url();
        let (admin, connection) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let role = format!("relay_{}", uuid::Uuid::new_v4().simple());
        // A superuser, like the tests' own role: the servers create and read the tables.
        admin
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{role}'"
            ))
            .await
            .unwrap();
        FeedCut::Postgres {
            admin,
            admin_url,
            role,
        }
    }

    async fn redis() -> FeedCut {
        let redis = PrivateRedis::start();
        let client = redis::Client::open(redis.url()).unwrap();
        let mut admin = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", WEST, "on", ">west", "~*", "&*", "+@all"])
            .query_async(&mut admin)
            .await
            .unwrap();
        FeedCut::Redis { redis, admin }
    }

    async fn redis_cluster() -> FeedCut {
        let url = redis_cluster_url();
        let user = format!("west_{}", uuid::Uuid::new_v4().simple());
        let hosts = url.strip_prefix("redis+cluster://").expect("a cluster URL");
        let mut nodes = Vec::new();
        for host in hosts.split(',') {
            let client = redis::Client::open(format!("redis://{host}")).unwrap();
            let mut node = client.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("ACL")
                .arg(&["SETUSER", user.as_str(), "on", ">west", "~*", "&*", "+@all"])
                .query_async(&mut node)
                .await
                .unwrap();
            nodes.push(node);
        }
        FeedCut::RedisCluster { url, nodes, user }
    }

    fn east_url(&self) -> String {
        match self {
            FeedCut::RedisCluster { url, .. } => url.clone(),
            FeedCut::Postgres { admin_url, .. } => admin_url.clone(),
            FeedCut::Redis { redis, .. } => redis.url(),
        }
    }

    fn west_url(&self) -> String {
        match self {
            FeedCut::Postgres {
                admin_url, role, ..
            } => {
                let (scheme, rest) = admin_url.split_once("://").expect("a URL");
                let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                format!("{scheme}://{role}:{role}@{host}")
            }
            FeedCut::Redis { redis, .. } => {
                format!("redis://{WEST}:west@127.0.0.1:{}", redis.port)
            }
            FeedCut::RedisCluster { url, user, .. } => {
                let hosts = url.strip_prefix("redis+cluster://").expect("a cluster URL");
                format!("redis+cluster://{user}:west@{hosts}")
            }
        }
    }

    /// Waits until west's feed listens to something, then kills its connection, refuses west
    /// new ones, and waits until the connection is gone.
    async fn cut_when_listening(&self) {
        let deadline = std::time::Instant::now() + WAIT;
        match self {
            FeedCut::Postgres { admin, role, .. } => {
                let listening = "SELECT pid FROM pg_stat_activity \
                                 WHERE usename = $1 AND query LIKE 'LISTEN %'";
                let pids: Vec<i32> = loop {
                    let rows = admin.query(listening, &[role]).await.unwrap();
                    if !rows.is_empty() {
                        break rows.iter().map(|row| row.get(0)).collect();
                    }
                    assert!(std::time::Instant::now() < deadline, "west never listened");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                };
                admin
                    .batch_execute(&format!("ALTER ROLE {role} NOLOGIN"))
                    .await
                    .unwrap();
                admin
                    .execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY($1)", &[&pids])
                    .await
                    .unwrap();
                loop {
                    let left: i64 = admin
                        .query_one(
                            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)",
                            &[&pids],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    if left == 0 {
                        break;
                    }
                    assert!(std::time::Instant::now() < deadline, "west's feed lives on");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
            FeedCut::Redis { admin, .. } => {
                let mut admin = admin.clone();
                let subscribed = async |admin: &mut redis::aio::MultiplexedConnection| {
                    let clients: String = redis::cmd("CLIENT")
                        .arg("LIST")
                        .query_async(admin)
                        .await
                        .unwrap();
                    clients.lines().any(|client| {
                        client.contains(&format!(" user={WEST} "))
                            && client
                                .split(' ')
                                .any(|field| field.strip_prefix("sub=").is_some_and(|n| n != "0"))
                    })
                };
                while !subscribed(&mut admin).await {
                    assert!(std::time::Instant::now() < deadline, "west never listened");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                let _: () = redis::cmd("ACL")
                    .arg(&["SETUSER", WEST, "off"])
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                let killed: i64 = redis::cmd("CLIENT")
                    .arg(&["KILL", "USER", WEST, "TYPE", "pubsub"])
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                assert_eq!(killed, 1, "west's feed");
            }
            FeedCut::RedisCluster { nodes, user, .. } => {
                // West watches one instance: its feed listens on the master of that one slot.
                let (mut node, id) = 'found: loop {
                    for node in nodes {
                        let mut node = node.clone();
                        let clients: String = redis::cmd("CLIENT")
                            .arg("LIST")
                            .query_async(&mut node)
                            .await
                            .unwrap();
                        let feed = clients.lines().find_map(|client| {
                            let field = |name: &str| {
                                client
                                    .split(' ')
                                    .find_map(|field| field.strip_prefix(name))
                                    .map(str::to_owned)
                            };
                            (field("user=")? == *user && field("ssub=")? != "0")
                                .then(|| field("id="))
                                .flatten()
                        });
                        if let Some(id) = feed {
                            break 'found (node, id);
                        }
                    }
                    assert!(std::time::Instant::now() < deadline, "west never listened");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                };
                let _: () = redis::cmd("ACL")
                    .arg(&["SETUSER", user.as_str(), "off"])
                    .query_async(&mut node)
                    .await
                    .unwrap();
                let killed: i64 = redis::cmd("CLIENT")
                    .arg(&["KILL", "ID", id.as_str()])
                    .query_async(&mut node)
                    .await
                    .unwrap();
                assert_eq!(killed, 1, "west's feed");
            }
        }
    }

    /// West may log in again.
    async fn restore(&self) {
        match self {
            FeedCut::Postgres { admin, role, .. } => admin
                .batch_execute(&format!("ALTER ROLE {role} LOGIN"))
                .await
                .unwrap(),
            FeedCut::Redis { admin, .. } => {
                let _: () = redis::cmd("ACL")
                    .arg(&["SETUSER", WEST, "on"])
                    .query_async(&mut admin.clone())
                    .await
                    .unwrap();
            }
            FeedCut::RedisCluster { nodes, user, .. } => {
                for node in nodes {
                    let _: () = redis::cmd("ACL")
                        .arg(&["SETUSER", user.as_str(), "on"])
                        .query_async(&mut node.clone())
                        .await
                        .unwrap();
                }
            }
        }
    }

    /// Removes what the test made (once the servers are gone).
    async fn close(self) {
        match self {
            FeedCut::Postgres { admin, role, .. } => admin
                .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
                .await
                .unwrap(),
            FeedCut::RedisCluster { nodes, user, .. } => {
                for mut node in nodes {
                    let _: i64 = redis::cmd("ACL")
                        .arg(&["DELUSER", user.as_str()])
                        .query_async(&mut node)
                        .await
                        .unwrap();
                }
            }
            FeedCut::Redis { .. } => {}
        }
    }
}

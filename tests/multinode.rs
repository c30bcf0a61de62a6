//! Several server processes sharing instances through Redis or PostgreSQL: a transition made on
//! one server reaches the sessions of the other (DESIGN behaviour 7), and only the servers whose
//! sessions watch the instance; each server gates on the state they share, not on a stale copy.

mod common;

use common::{
    Client, PluginDir, Scrape, Server, handle_of, names, postgres_url, redis_cluster_url, redis_url,
};
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
    bob.changes.wait_for(1).await;
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

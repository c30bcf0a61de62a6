//! DESIGN behaviour 4: calls on one instance are serialized.

mod common;

use common::Client;
use serde_json::json;

#[tokio::test]
async fn of_100_concurrent_approvals_exactly_one_succeeds() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let client = std::sync::Arc::new(Client::http(&server.url).await);
    client.call("invoice.submit", json!({"amount": 99})).await;
    assert_eq!(client.invoice_state().await, json!("review"));

    let calls: Vec<_> = (0..100)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call("invoice.approve", json!({})).await })
        })
        .collect();
    let mut succeeded = 0;
    let mut forbidden = 0;
    for call in calls {
        let result = call.await.expect("task");
        if result.is_error == Some(true) {
            let code = result
                .structured_content
                .as_ref()
                .map(|s| s["error"]["code"].clone());
            assert_eq!(
                code,
                Some(json!("FORBIDDEN")),
                "the losers are refused by the gate: {result:?}"
            );
            forbidden += 1;
        } else {
            succeeded += 1;
        }
    }
    assert_eq!((succeeded, forbidden), (1, 99));
    assert_eq!(client.invoice_state().await, json!("approved"));
}

//! Turnstile's `GET /stats`, read only if the target answers it: the one server-specific probe
//! of the load tester, used by `--mint --after-mint-wait` to end its wait as soon as the server
//! says every instance passivated and no subscription is left. Any other server (no such route,
//! or other fields) is simply waited for the whole time.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// What the wait for passivation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passivation {
    /// `/stats` showed no live instance and no subscription.
    Seen,
    /// `/stats` answered, but still showed live instances or subscriptions when the wait ended.
    NotSeen,
    /// The target has no Turnstile `/stats`: the whole wait was waited.
    Unknown,
}

/// After the passivation shows, how long the server gets to hand memory back before it is read.
const AFTER_PASSIVATION: Duration = Duration::from_secs(1);

/// The `/stats` address beside an MCP endpoint: the same origin, path `/stats`.
pub fn stats_url(endpoint: &str) -> Option<String> {
    let rest = endpoint.strip_prefix("http://")?;
    let origin = rest.split('/').next()?;
    Some(format!("http://{origin}/stats"))
}

/// Waits up to `wait` for `/stats` to show every instance passivated and no subscription left
/// (then a second more); without a readable `/stats`, waits all of `wait`.
pub async fn wait_for_passivation(endpoint: &str, wait: Duration) -> Passivation {
    let deadline = Instant::now() + wait;
    let (Some(url), Ok(http)) = (
        stats_url(endpoint),
        reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build(),
    ) else {
        tokio::time::sleep_until(deadline).await;
        return Passivation::Unknown;
    };
    loop {
        match idle(&http, &url).await {
            None => {
                tokio::time::sleep_until(deadline).await;
                return Passivation::Unknown;
            }
            Some(true) => {
                tokio::time::sleep(AFTER_PASSIVATION).await;
                return Passivation::Seen;
            }
            Some(false) if Instant::now() >= deadline => return Passivation::NotSeen,
            Some(false) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Whether `/stats` shows no live instance and no subscription; `None` when it is not
/// Turnstile's `/stats`.
async fn idle(http: &reqwest::Client, url: &str) -> Option<bool> {
    let response = http.get(url).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let stats: Value = serde_json::from_slice(&response.bytes().await.ok()?).ok()?;
    is_idle(&stats)
}

fn is_idle(stats: &Value) -> Option<bool> {
    let live = stats.pointer("/registry/instances")?.as_u64()?;
    let subscriptions = stats.pointer("/notifier/subscriptions")?.as_u64()?;
    Some(live == 0 && subscriptions == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stats_live_beside_the_endpoint() {
        assert_eq!(
            stats_url("http://127.0.0.1:8080/mcp").as_deref(),
            Some("http://127.0.0.1:8080/stats")
        );
        assert_eq!(
            stats_url("http://host:1/a/b").as_deref(),
            Some("http://host:1/stats")
        );
        assert_eq!(stats_url("stdio: turnstile serve"), None);
    }

    #[test]
    fn idle_means_no_live_instance_and_no_subscription() {
        let stats = |live, subscriptions| json!({"registry": {"instances": live}, "notifier": {"subscriptions": subscriptions}});
        assert_eq!(is_idle(&stats(0, 0)), Some(true));
        assert_eq!(is_idle(&stats(3, 0)), Some(false));
        assert_eq!(is_idle(&stats(0, 1)), Some(false));
        assert_eq!(is_idle(&json!({"uptime": 3})), None);
    }
}

//! `GET /metrics`, scraped and parsed.

use std::collections::BTreeMap;

use super::Server;

/// One series: its labels, sorted.
pub type Labels = BTreeMap<String, String>;

/// One `GET /metrics`, parsed.
pub struct Scrape(prometheus_parse::Scrape);

impl Scrape {
    /// Scrapes `server` (loopback: no token needed) and parses the body.
    pub async fn of(server: &Server) -> Scrape {
        let response = reqwest::get(format!("{}/metrics", server.base()))
            .await
            .expect("GET /metrics");
        assert_eq!(response.status(), 200);
        Scrape::parse(response).await
    }

    pub async fn parse(response: reqwest::Response) -> Scrape {
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let text = response.text().await.expect("the body");
        let lines = text.lines().map(|line| Ok(line.to_owned()));
        Scrape(prometheus_parse::Scrape::parse(lines).expect("Prometheus text"))
    }

    /// Every series of `metric`, with its value: a counter's or gauge's value, a histogram's
    /// count of observations.
    pub fn series(&self, metric: &str) -> BTreeMap<Labels, f64> {
        use prometheus_parse::Value as V;
        self.0
            .samples
            .iter()
            .filter(|sample| sample.metric == metric)
            .map(|sample| {
                let labels = sample
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let value = match &sample.value {
                    V::Counter(v) | V::Gauge(v) | V::Untyped(v) => *v,
                    V::Histogram(buckets) => {
                        buckets
                            .iter()
                            .find(|bucket| bucket.less_than.is_infinite())
                            .expect("a +Inf bucket")
                            .count
                    }
                    V::Summary(_) => panic!("{metric} is a summary"),
                };
                (labels, value)
            })
            .collect()
    }

    /// The value of the series of `metric` with exactly `labels` (0 if it is absent).
    pub fn value(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(metric)
            .get(&labels_of(labels))
            .copied()
            .unwrap_or(0.0)
    }

    /// How each series of `metric` moved since `before` (series that did not move are left out).
    pub fn moved_since(&self, before: &Scrape, metric: &str) -> BTreeMap<Labels, f64> {
        let earlier = before.series(metric);
        self.series(metric)
            .into_iter()
            .map(|(labels, now)| {
                let delta = now - earlier.get(&labels).copied().unwrap_or(0.0);
                (labels, delta)
            })
            .filter(|(_, delta)| *delta != 0.0)
            .collect()
    }
}

pub fn labels_of(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

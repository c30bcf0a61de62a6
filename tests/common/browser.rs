//! A real browser for the console's test: Debian's `chromium`, headless, driven through
//! `chromedriver` over the W3C WebDriver protocol (a handful of JSON requests: a client crate
//! would bring a second HTTP stack for them). [`Browser::start`] starts the driver on a free
//! port and opens a session; dropping it ends both.
//!
//! Where Chromium is missing, [`Browser::start`] says so: under `CI=true` the test must fail
//! (`.ci/run` installs it), elsewhere the test may skip with that reason.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

use super::{eventually, poll};

/// Where Debian installs them (`apt-get install chromium chromium-driver`).
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The W3C name of an element reference in a WebDriver answer.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium session.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

/// An element of the page, as the driver names it (an element of a reloaded page is another).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element(String);

/// Why there is no browser: Chromium or its driver is not installed.
pub fn missing() -> Option<String> {
    let absent: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|path| !Path::new(path).exists())
        .collect();
    (!absent.is_empty()).then(|| {
        format!(
            "{} not installed: `apt-get install -y chromium chromium-driver` (.ci/run does)",
            absent.join(" and ")
        )
    })
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a 1400×1000 window.
    pub async fn start() -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually(
            "chromedriver did not answer in 20 s",
            Duration::from_secs(20),
            Duration::from_millis(50),
            async || match http.get(format!("{base}/status")).send().await {
                Ok(answer) => answer.status().is_success(),
                Err(_) => false,
            },
        )
        .await;
        let mut browser = Browser {
            driver,
            base,
            session: String::new(),
            http,
        };
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                // Root in CI has no user namespace sandbox to give Chromium.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"],
            },
        }}});
        let session = browser.send("POST", "/session", Some(capabilities)).await;
        browser.session = session["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {session}"))
            .to_owned();
        browser
    }

    /// One WebDriver command; its `value`. Panics on a WebDriver error.
    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_send(method, path, body)
            .await
            .unwrap_or_else(|error| panic!("WebDriver {method} {path}: {error}"))
    }

    /// One WebDriver command; its `value`, or the driver's error message.
    async fn try_send(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self
                .http
                .post(url)
                .header("content-type", "application/json")
                .body(body.unwrap_or_else(|| json!({})).to_string()),
        };
        let answer = request.send().await.map_err(|e| e.to_string())?;
        let status = answer.status();
        let text = answer.text().await.map_err(|e| e.to_string())?;
        let parsed: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        if !status.is_success() {
            return Err(format!(
                "{}: {}",
                parsed["value"]["error"], parsed["value"]["message"]
            ));
        }
        Ok(parsed["value"].clone())
    }

    fn at(&self, path: &str) -> String {
        format!("/session/{}{path}", self.session)
    }

    /// Loads `url` and waits for it.
    pub async fn open(&self, url: &str) {
        self.send("POST", &self.at("/url"), Some(json!({ "url": url })))
            .await;
    }

    /// The page's URL.
    pub async fn url(&self) -> String {
        self.send("GET", &self.at("/url"), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The elements `css` selects now (none: empty).
    pub async fn all(&self, css: &str) -> Vec<Element> {
        let found = self
            .send(
                "POST",
                &self.at("/elements"),
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found
            .as_array()
            .map(|elements| {
                elements
                    .iter()
                    .filter_map(|e| e[ELEMENT].as_str())
                    .map(|id| Element(id.to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first element `css` selects, if any.
    pub async fn find(&self, css: &str) -> Option<Element> {
        self.all(css).await.into_iter().next()
    }

    /// The first element `css` selects, waiting up to `within` for the page to show one (a
    /// click on a form's button returns before the next page has loaded).
    pub async fn wait_for(&self, css: &str, within: Duration) -> Option<Element> {
        poll(within, Duration::from_millis(100), async || {
            self.find(css).await
        })
        .await
        .ok()
    }

    /// What `element` shows as text.
    pub async fn text(&self, element: &Element) -> String {
        self.send(
            "GET",
            &self.at(&format!("/element/{}/text", element.0)),
            None,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// The text of the first element `css` selects (`None`: there is none).
    pub async fn text_of(&self, css: &str) -> Option<String> {
        match self.find(css).await {
            Some(element) => Some(self.text(&element).await),
            None => None,
        }
    }

    /// Types `text` into `element`.
    pub async fn type_into(&self, element: &Element, text: &str) {
        self.send(
            "POST",
            &self.at(&format!("/element/{}/value", element.0)),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Clicks `element` (and, for a link or a form's button, waits for the next page).
    pub async fn click(&self, element: &Element) {
        self.send(
            "POST",
            &self.at(&format!("/element/{}/click", element.0)),
            None,
        )
        .await;
    }

    /// Waits up to `within` until the text of `css` is `wanted`; the last text seen otherwise.
    pub async fn wait_for_text(
        &self,
        css: &str,
        wanted: &str,
        within: Duration,
    ) -> Result<(), String> {
        poll(within, Duration::from_millis(100), async || {
            let seen = self.text_of(css).await;
            if seen.as_deref() == Some(wanted) {
                Ok(())
            } else {
                Err(format!(
                    "{css} shows {seen:?}, not {wanted:?}, after {} s",
                    within.as_secs()
                ))
            }
        })
        .await
    }

    /// Saves a screenshot of the window as `dir/name.png`; returns its path.
    pub async fn screenshot(&self, dir: &Path, name: &str) -> Option<PathBuf> {
        use base64::Engine;
        let png = self
            .try_send("GET", &self.at("/screenshot"), None)
            .await
            .ok()?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str()?)
            .ok()?;
        std::fs::create_dir_all(dir).ok()?;
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, bytes).ok()?;
        Some(path)
    }

    /// The page's HTML, for a failure's message.
    pub async fn source(&self) -> String {
        self.try_send("GET", &self.at("/source"), None)
            .await
            .ok()
            .and_then(|source| source.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Ends the session and the driver.
    pub async fn quit(mut self) {
        let _ = self.try_send("DELETE", &self.at(""), None).await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A test that panicked never reached `quit`: the driver (and its Chromium) must not
        // outlive it.
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

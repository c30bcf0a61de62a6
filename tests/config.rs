//! `turnstile serve`'s settings from a config file and the environment, and `--print-config`.

mod common;

use std::{
    ffi::OsStr,
    path::Path,
    process::{Command, Output},
};

use common::{Client, PluginDir, Server, turnstile_bin};
use serde_json::json;

/// A TOML string holding `path`.
fn toml_path(path: &Path) -> String {
    toml::Value::String(path.to_str().expect("a UTF-8 temp path").to_owned()).to_string()
}

/// `turnstile serve ARGS` run to its end with `env` set (and no other `TURNSTILE_` variable).
fn serve_once(args: &[&OsStr], env: &[(&str, &str)]) -> Output {
    Command::new(turnstile_bin())
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run turnstile serve")
}

#[tokio::test]
async fn a_server_started_from_a_config_file_alone_serves_what_it_says() {
    let plugins = PluginDir::with(&["invoice", "testkit"]);
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("turnstile.toml");
    // Not the default address (127.0.0.1:8080): another loopback address, any port, which is
    // not a loopback name the `Host` check knows: the array key lets clients in.
    std::fs::write(
        &config,
        format!(
            "plugins = {}\nhttp = \"127.0.0.7:0\"\nallowed-host = [\"127.0.0.7\"]\n\
             data-dir = {}\nallow-test-plugins = true\n\n\
             [plugin.testkit]\ngreeting = \"hello from the file\"\napi_key = \"file-secret\"\n\
             retries = 3\n",
            toml_path(plugins.path()),
            toml_path(data.path()),
        ),
    )
    .unwrap();
    let server = Server::serve_with(
        &[OsStr::new("--config"), config.as_os_str()],
        // The environment beats the file, key by key.
        &[("TURNSTILE_PLUGIN_TESTKIT_API_KEY", "env-secret")],
    );
    server.wait_for_log(&format!(
        "settings read from the config file file={}",
        config.display()
    ));
    assert!(
        server.url.starts_with("http://127.0.0.7:"),
        "serves on the configured address: {}",
        server.url
    );
    let client = Client::http(&server.url).await;
    let tools = client.tool_names().await;
    for tool in ["invoice.submit", "testkit.echo"] {
        assert!(
            tools.contains(&tool.to_string()),
            "the configured plugin directory's {tool} is listed: {tools:?}"
        );
    }
    let echo = client.call("testkit.echo", json!({})).await;
    assert_eq!(
        echo.structured_content.expect("echo's output")["config"],
        json!({"greeting": "hello from the file", "api_key": "env-secret", "retries": 3}),
        "the plugin got its table at init, the variable over the file's key"
    );
    assert!(
        data.path().join("state.redb").exists(),
        "the default store lives in the configured data directory"
    );
    client.close().await;
    let log = server.stderr();
    for secret in ["file-secret", "env-secret"] {
        assert!(
            !log.contains(secret),
            "a plugin's value is never logged:\n{log}"
        );
    }
}

#[test]
fn print_config_shows_the_environment_over_the_file_and_redacts_a_store_password() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("turnstile.toml");
    std::fs::write(
        &config,
        "plugins = \"/srv/turnstile/plugins\"\ntool-timeout = 5\nmax-sessions = 1\n\
         allowed-host = [\"file.example\"]\n\n[plugin.payment]\napi_key = \"file-secret\"\n",
    )
    .unwrap();
    let output = serve_once(
        &[
            OsStr::new("--config"),
            config.as_os_str(),
            OsStr::new("--print-config"),
        ],
        &[
            (
                "TURNSTILE_STORE",
                "postgres://app:hunter2@127.0.0.1:5432/test",
            ),
            ("TURNSTILE_MAX_SESSIONS", "9"),
            ("TURNSTILE_ALLOWED_HOST", "a.example,b.example"),
        ],
    );
    let printed = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "store = \"postgres://app:***@127.0.0.1:5432/test\"  # environment, TURNSTILE_STORE",
        "max-sessions = 9  # environment, TURNSTILE_MAX_SESSIONS",
        "allowed-host = [\"a.example\", \"b.example\"]  # environment, TURNSTILE_ALLOWED_HOST",
        &format!("tool-timeout = 5  # config file {}", config.display()),
        "plugin-pool = 64\n",
        "api_key = \"***\"",
    ] {
        assert!(
            printed
                .lines()
                .any(|printed| format!("{printed}\n").starts_with(line)),
            "{line:?} in:\n{printed}"
        );
    }
    for secret in ["hunter2", "file-secret"] {
        assert!(!printed.contains(secret), "{secret} shown:\n{printed}");
    }

    // What it prints is a config file that means the same (secrets aside, which stay `***`).
    let reprinted_file = dir.path().join("printed.toml");
    std::fs::write(&reprinted_file, &printed).unwrap();
    let again = serve_once(
        &[
            OsStr::new("--config"),
            reprinted_file.as_os_str(),
            OsStr::new("--print-config"),
        ],
        &[],
    );
    assert_eq!(again.status.code(), Some(0));
    let without_sources = |text: &str| -> Vec<String> {
        text.lines()
            .map(|line| line.split("  # ").next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        without_sources(&String::from_utf8(again.stdout).unwrap()),
        without_sources(&printed)
    );
}

#[test]
fn a_bad_config_file_is_refused_naming_the_key_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("turnstile.toml");
    std::fs::write(&config, "plugins = \"/p\"\n\nidle-afterr = 5\n").unwrap();
    let output = serve_once(&[OsStr::new("--config"), config.as_os_str()], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&config.display().to_string()), "{stderr}");
    assert!(stderr.contains("line 3"), "{stderr}");
    assert!(stderr.contains("unknown field `idle-afterr`"), "{stderr}");

    let missing = dir.path().join("missing.toml");
    let output = serve_once(&[OsStr::new("--config"), missing.as_os_str()], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot read the config file {}",
            missing.display()
        )),
        "{stderr}"
    );
}

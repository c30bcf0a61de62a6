use std::{collections::BTreeSet, net::SocketAddr, path::PathBuf, process::Command};

use clap::{Args, FromArgMatches};
use serde::de::{self, Deserialize, Deserializer, Visitor};

use super::{ConfigError, Origin, Resolved, ServeArgs, ServeSettings, file::ConfigFile};
use crate::logs::LogFormat;

/// Parses `serve ARGS` as `main` does, with `file` (TOML text) as the --config file.
fn resolve(args: &[&str], file: Option<&str>) -> Result<Resolved, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let mut argv = vec!["serve".to_string()];
    if let Some(text) = file {
        let path = dir.path().join("turnstile.toml");
        std::fs::write(&path, text).unwrap();
        argv.push(format!("--config={}", path.display()));
    }
    argv.extend(args.iter().map(ToString::to_string));
    let matches = ServeArgs::augment_args(clap::Command::new("serve"))
        .try_get_matches_from(argv)
        .unwrap();
    let args = ServeArgs::from_arg_matches(&matches).unwrap();
    args.resolve(&matches, LogFormat::Text)
}

fn settings(args: &[&str], file: Option<&str>) -> ServeSettings {
    resolve(args, file).unwrap().settings
}

fn invalid(file: &str) -> String {
    match resolve(&[], Some(file)) {
        Err(ConfigError::Invalid { message, .. }) => message,
        other => panic!("expected an invalid file, got {other:?}"),
    }
}

/// clap reads the environment of the process, which a test must not change (other tests run on
/// other threads meanwhile). So a test that needs variables runs itself again in a child process
/// that has them: this returns `true` in the parent (after the child passed) and `false` in the
/// child, where the test goes on.
fn rerun_with_env(test: &str, vars: &[(&str, &str)]) -> bool {
    const CHILD: &str = "TURNSTILE_CONFIG_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        return false;
    }
    // The harness names tests without the crate: `config::tests::<name>`.
    let module = module_path!().split_once("::").unwrap().1;
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &format!("{module}::{test}"), "--nocapture"])
        .env(CHILD, "1")
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    true
}

#[test]
fn the_command_line_beats_the_environment_which_beats_the_file_which_beats_the_default() {
    if rerun_with_env(
        "the_command_line_beats_the_environment_which_beats_the_file_which_beats_the_default",
        &[
            ("TURNSTILE_HTTP", "127.0.0.1:2002"),
            ("TURNSTILE_TOOL_TIMEOUT", "22"),
            ("TURNSTILE_ALLOWED_HOST", "a.example,b.example"),
            ("TURNSTILE_STATELESS", "yes"),
        ],
    ) {
        return;
    }
    let file = r#"
        plugins = "/srv/plugins"
        http = "127.0.0.1:3003"
        tool-timeout = 33
        idle-after = 44
        allowed-host = ["file.example"]
        allowed-origin = ["https://app.example"]
        store = "memory:"
        log-format = "json"
    "#;
    let resolved = resolve(&["--tool-timeout", "11"], Some(file)).unwrap();
    let settings = &resolved.settings;
    assert_eq!(
        settings.tool_timeout, 11,
        "the flag over the variable and file"
    );
    assert_eq!(
        settings.http,
        Some(SocketAddr::from(([127, 0, 0, 1], 2002)))
    );
    assert_eq!(settings.allowed_hosts, ["a.example", "b.example"]);
    assert!(settings.stateless, "a yes/no variable sets a switch");
    assert_eq!(settings.idle_after, 44, "the file over the default");
    assert_eq!(settings.allowed_origins, ["https://app.example"]);
    assert_eq!(settings.store.as_deref(), Some("memory:"));
    assert_eq!(settings.plugins, Some(PathBuf::from("/srv/plugins")));
    assert_eq!(settings.log_format, LogFormat::Json);
    assert_eq!(settings.header_timeout, 10, "the default");
    assert_eq!(resolved.origin("tool-timeout"), &Origin::CommandLine);
    assert_eq!(
        resolved.origin("http"),
        &Origin::Environment("TURNSTILE_HTTP".into())
    );
    assert!(matches!(resolved.origin("idle-after"), Origin::File(_)));
    assert_eq!(resolved.origin("header-timeout"), &Origin::Default);

    // Without the file, the variables still beat the defaults.
    let settings = settings_from_env_only();
    assert_eq!(settings.tool_timeout, 22);
    assert_eq!(settings.idle_after, 600);
}

fn settings_from_env_only() -> ServeSettings {
    settings(&["--plugins", "/p"], None)
}

#[test]
fn the_file_fills_in_what_flags_leave_out() {
    let file = "plugins = \"/from-file\"\nmax-sessions = 7\nstdio = true\n";
    let settings = settings(&["--plugins", "/flag"], Some(file));
    assert_eq!(settings.plugins, Some(PathBuf::from("/flag")));
    assert_eq!(settings.max_sessions, Some(7));
    assert!(settings.stdio);
    assert_eq!(settings.tool_timeout, 60);
}

#[test]
fn the_body_timeout_reaches_the_connections() {
    let options = |args: &[&str], file| resolve(args, file).unwrap().into_options();
    let default = options(&["--plugins", "/p"], None);
    assert_eq!(
        default.http.connections.body_timeout,
        std::time::Duration::from_secs(10)
    );
    let from_file = options(&["--plugins", "/p"], Some("body-timeout = 3\n"));
    assert_eq!(
        from_file.http.connections.body_timeout,
        std::time::Duration::from_secs(3)
    );
    let flag = options(&["--plugins", "/p", "--body-timeout", "4"], None);
    assert_eq!(
        flag.http.connections.body_timeout,
        std::time::Duration::from_secs(4)
    );
}

#[test]
fn a_body_timeout_of_zero_is_refused_from_a_flag_or_a_file() {
    for (args, file) in [
        (&["--plugins", "/p", "--body-timeout", "0"][..], None),
        (&["--plugins", "/p"][..], Some("body-timeout = 0\n")),
    ] {
        let message = resolve(args, file).expect_err("refused").to_string();
        assert!(message.contains("body-timeout"), "{message}");
        assert!(message.contains("at least 1"), "{message}");
    }
}

#[test]
fn an_unknown_key_is_refused_with_its_line() {
    let message = invalid("plugins = \"/p\"\n\nhttp-adress = \"127.0.0.1:1\"\n");
    assert!(message.contains("line 3"), "{message}");
    assert!(message.contains("unknown field `http-adress`"), "{message}");
}

#[test]
fn a_wrong_type_is_refused_with_its_line_and_key() {
    let message = invalid("plugins = \"/p\"\ntool-timeout = \"60\"\n");
    assert!(message.contains("line 2"), "{message}");
    assert!(message.contains("tool-timeout"), "{message}");
    assert!(message.contains("expected u64"), "{message}");
    let message = invalid("plugins = \"/p\"\nhttp = \"localhost\"\n");
    assert!(message.contains("line 2"), "{message}");
    let message = invalid("[plugin]\npayment = 1\n");
    assert!(message.contains("line 2"), "{message}");
}

#[test]
fn plugin_tables_go_under_plugin_not_plugins() {
    let message = invalid("[plugins.payment]\napi_key = \"x\"\n");
    assert!(message.contains("[plugin.payment]"), "{message}");
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let matches = ServeArgs::augment_args(clap::Command::new("serve"))
        .try_get_matches_from(["serve", "--config", "/nonexistent/turnstile.toml"])
        .unwrap();
    let args = ServeArgs::from_arg_matches(&matches).unwrap();
    let error = args.resolve(&matches, LogFormat::Text).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }), "{error:?}");
    assert!(
        error.to_string().contains("/nonexistent/turnstile.toml"),
        "{error}"
    );
}

#[test]
fn settings_that_do_not_go_together_name_where_each_came_from() {
    let error = resolve(
        &["--http", "127.0.0.1:1"],
        Some("plugins = \"/p\"\nstdio = true\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("`stdio` (config file"), "{error}");
    assert!(error.contains("`http` (command line)"), "{error}");
    // A requirement may be met by the file: the flag alone would not do for clap.
    let settings = settings(
        &["--oauth-issuer", "https://issuer.example"],
        Some("plugins = \"/p\"\npublic-url = \"https://mcp.example/mcp\"\n"),
    );
    assert_eq!(
        settings.public_url.as_deref(),
        Some("https://mcp.example/mcp")
    );
    let error = resolve(&["--plugins", "/p", "--tls-cert", "c.pem"], None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`tls-cert` (command line) needs `tls-key`"),
        "{error}"
    );
    let error = resolve(
        &["--plugins", "/p", "--max-instances-per-principal", "5"],
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("needs `auth-token-file or oauth-issuer`"),
        "{error}"
    );
    let error = resolve(&[], None).unwrap_err().to_string();
    assert!(error.contains("--plugins"), "{error}");
    let error = resolve(&[], Some("plugins = \"/p\"\nstate-handle-key = \"\"\n"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("`state-handle-key` (config file"), "{error}");
}

#[test]
fn printed_settings_read_back_as_the_same_settings() {
    let file = r#"
        plugins = "/srv/plugins"
        http = "127.0.0.1:3003"
        allowed-host = ["a.example", "b.example"]
        state-handle-key = "ticket"
        max-sessions = 100
        auth-token-file = "/etc/turnstile/tokens"
        log-format = "json"

        [plugin.payment]
        currency = "EUR"
    "#;
    let first = resolve(&["--tool-timeout", "5", "--store", "memory:"], Some(file)).unwrap();
    let printed = first.to_toml().unwrap();
    let second = resolve(&[], Some(&printed)).unwrap();
    assert_eq!(second.settings, first.settings, "printed:\n{printed}");
    assert_eq!(
        second.to_toml().unwrap().lines().count(),
        printed.lines().count()
    );
    assert!(
        printed.contains("tool-timeout = 5  # command line\n"),
        "{printed}"
    );
    assert!(printed.contains("header-timeout = 10\n"), "{printed}");
    assert!(
        printed.contains("# max-connections: not set\n"),
        "{printed}"
    );
    // A plugin's values may be secrets: its keys are shown, never its values.
    assert!(
        printed.contains("[plugin.payment]\ncurrency = \"***\"  # config file"),
        "{printed}"
    );
    assert!(!printed.contains("EUR"), "{printed}");
}

#[test]
fn printing_redacts_passwords_in_urls() {
    let resolved = resolve(
        &[
            "--plugins",
            "/p",
            "--store",
            "postgres://app:hunter2@db.example/turnstile",
        ],
        None,
    )
    .unwrap();
    let printed = resolved.to_toml().unwrap();
    assert!(
        printed.contains("store = \"postgres://app:***@db.example/turnstile\""),
        "{printed}"
    );
    assert!(!printed.contains("hunter2"), "{printed}");
}

#[test]
fn every_setting_is_a_flag_a_variable_and_a_key_by_one_rule() {
    let command = ServeSettings::augment_args(clap::Command::new("serve"));
    let mut flags = BTreeSet::new();
    for arg in command.get_arguments() {
        let long = arg.get_long().expect("every setting is a long flag");
        let variable = format!("TURNSTILE_{}", long.to_uppercase().replace('-', "_"));
        assert_eq!(
            arg.get_env().and_then(|env| env.to_str()),
            Some(variable.as_str()),
            "--{long}"
        );
        flags.insert(long.to_string());
    }
    flags.insert("log-format".into());
    let mut keys = struct_fields::<ServeSettings>();
    assert!(keys.remove("plugin"), "the plugin tables");
    assert_eq!(keys, flags);
    // The file parser reads the same keys.
    ConfigFile::parse(
        std::path::Path::new("t.toml"),
        "allowed-host = []\nallowed-origin = []\nlog-format = \"text\"\n",
    )
    .unwrap();
}

/// The field names serde knows `T` by (what `deny_unknown_fields` accepts).
fn struct_fields<'de, T: Deserialize<'de>>() -> BTreeSet<String> {
    struct Fields(BTreeSet<String>);
    impl<'de> Deserializer<'de> for &mut Fields {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only structs"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.extend(fields.iter().map(ToString::to_string));
            Err(de::Error::custom("fields recorded"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut fields = Fields(BTreeSet::new());
    let _ = T::deserialize(&mut fields);
    fields.0
}

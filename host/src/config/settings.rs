//! [`ServeSettings`]: every setting of `turnstile serve`, as a flag, an environment variable and
//! a config-file key, and what they mean for the server ([`ServeSettings::into_options`]).
//!
//! One struct is both the clap arguments and the serde shape of the file, so a flag cannot be
//! added without its key. The names follow one rule, checked by a unit test: the flag
//! `--some-flag` is the variable `TURNSTILE_SOME_FLAG` and the key `some-flag`. Relations between
//! settings (`--stdio` excludes `--http`, OAuth needs `--public-url`, …) are checked by
//! [`ServeSettings::check`] once the layers are merged, not by clap: clap would see only the
//! command line and the environment, and a key from the file may satisfy them.

use std::{collections::BTreeMap, fmt, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, builder::BoolishValueParser};
use serde::{Deserialize, Serialize};

use crate::{
    actors::{ActorOptions, LeaseSettings},
    commands::serve::{self, ServeOptions, Transport},
    invoke::DEFAULT_MAX_RESULT_BYTES,
    logs::LogFormat,
    mcp::{self, ConnectionLimits, HandleMode, HttpOptions, NextStepMode, OAuthOptions, TlsFiles},
    plugin::{DEFAULT_POOL_SIZE, PluginConfigs},
};

/// Every setting of `turnstile serve`. Doc comments are the `--help` text.
///
/// `Default` exists only so that a config file may leave keys out (serde fills them in, and the
/// merge takes from the file only the keys it names); it is not the command's defaults, which
/// are clap's.
#[derive(Args, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServeSettings {
    /// Directory of plugin shared libraries to load (required).
    #[arg(long, env = "TURNSTILE_PLUGINS", hide_env = true, value_name = "DIR")]
    pub plugins: Option<PathBuf>,
    /// Serve one client over stdin/stdout.
    #[arg(
        long,
        env = "TURNSTILE_STDIO",
        hide_env = true,
        value_parser = BoolishValueParser::new()
    )]
    pub stdio: bool,
    /// Serve Streamable HTTP on this address, endpoint `/mcp` (default 127.0.0.1:8080).
    #[arg(long, env = "TURNSTILE_HTTP", hide_env = true, value_name = "ADDRESS")]
    pub http: Option<SocketAddr>,
    /// Where instance state lives: `memory:`, `embedded:PATH`, `redis://…`, `postgres://…`.
    /// Default over HTTP: the embedded store, `state.redb` in the data directory. Default over
    /// stdio: `memory:`, since a stdio connection is one session whose instances end with it
    /// (and several stdio servers may run at once); name a store to keep handle-keyed state.
    #[arg(long, env = "TURNSTILE_STORE", hide_env = true, value_name = "URL")]
    pub store: Option<String>,
    /// Names this deployment's data in a shared store: Redis keys `NAMESPACE:…`, PostgreSQL
    /// table `NAMESPACE_instances`. Servers that share instances use the same one.
    #[arg(
        long,
        env = "TURNSTILE_STORE_NAMESPACE",
        hide_env = true,
        value_name = "NAME",
        default_value = "turnstile"
    )]
    pub store_namespace: String,
    /// Keep each instance's last N audit entries (transitions); a save that appends one drops
    /// older ones.
    #[arg(
        long,
        env = "TURNSTILE_AUDIT_KEEP",
        hide_env = true,
        value_name = "N",
        default_value_t = crate::store::DEFAULT_AUDIT_KEEP,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub audit_keep: u64,
    /// With a Redis store that has replicas: acknowledge a transition only once this many
    /// replicas have it (Redis `WAIT`, within the store's timeout), so a failover keeps it. A
    /// save fewer replicas confirmed is STORE_UNAVAILABLE with `"committed": "unknown"`.
    #[arg(
        long,
        env = "TURNSTILE_REDIS_WAIT_REPLICAS",
        hide_env = true,
        value_name = "N",
        default_value_t = 0
    )]
    pub redis_wait_replicas: u32,
    /// Directory for the embedded store (created on first start). Default:
    /// `$XDG_DATA_HOME/turnstile`, else `~/.local/share/turnstile`.
    #[arg(long, env = "TURNSTILE_DATA_DIR", hide_env = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// End an HTTP session after this many seconds without a request.
    #[arg(
        long,
        env = "TURNSTILE_SESSION_IDLE_TIMEOUT",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 300
    )]
    pub session_idle_timeout: u64,
    /// Passivate an HTTP session after this many seconds with no request in flight (no open
    /// event stream): only a small record of it is kept, and its next request restores it,
    /// unseen by the client. 0: never.
    #[arg(
        long,
        env = "TURNSTILE_SESSION_PASSIVATE_AFTER",
        hide_env = true,
        value_name = "SECS",
        default_value_t = mcp::DEFAULT_SESSION_PASSIVATE_AFTER.as_secs()
    )]
    pub session_passivate_after: u64,
    /// Also accept this `Host` header on HTTP (loopback is always accepted). Repeatable, or
    /// comma-separated.
    #[arg(
        long = "allowed-host",
        env = "TURNSTILE_ALLOWED_HOST",
        hide_env = true,
        value_name = "HOST",
        value_delimiter = ','
    )]
    #[serde(rename = "allowed-host")]
    pub allowed_hosts: Vec<String>,
    /// Also accept requests from this browser `Origin` on HTTP, as `scheme://host[:port]`
    /// (`:*` for any port); loopback origins are accepted when serving on loopback, a request
    /// from any other origin is refused (403). Repeatable, or comma-separated.
    #[arg(
        long = "allowed-origin",
        env = "TURNSTILE_ALLOWED_ORIGIN",
        hide_env = true,
        value_name = "URL",
        value_delimiter = ','
    )]
    #[serde(rename = "allowed-origin")]
    pub allowed_origins: Vec<String>,
    /// Handle mode: instances are named by a handle the client passes as this tool argument
    /// (or in a request's `_meta`), minted when it starts a workflow. Without a value the
    /// name is `handle`.
    #[arg(
        long,
        env = "TURNSTILE_STATE_HANDLE_KEY",
        hide_env = true,
        value_name = "NAME",
        num_args = 0..=1,
        default_missing_value = mcp::DEFAULT_HANDLE_KEY
    )]
    pub state_handle_key: Option<String>,
    /// HTTP without sessions (for deployment behind a load balancer): every request stands
    /// alone and handles carry all state. Implies handle mode.
    #[arg(
        long,
        env = "TURNSTILE_STATELESS",
        hide_env = true,
        value_parser = BoolishValueParser::new()
    )]
    pub stateless: bool,
    /// Where a workflow tool's result says where its instance is and which tools may come
    /// next: `both` (a closing text block and `_meta`), `text`, `meta`, or `off`.
    #[arg(
        long,
        env = "TURNSTILE_NEXT_STEP",
        hide_env = true,
        value_name = "WHERE",
        value_enum,
        default_value_t = NextStepMode::Both
    )]
    pub next_step: NextStepMode,
    /// How many seconds a client may keep a 2026-07-28 `tools/list`, `prompts/list` or
    /// `resources/list` (their `ttlMs`): those lists change only with the plugin catalog.
    #[arg(
        long,
        env = "TURNSTILE_LIST_TTL",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 300
    )]
    pub list_ttl: u64,
    /// The most different handles one request may name in `_meta` (more is -32602, before
    /// any is looked up).
    #[arg(
        long,
        env = "TURNSTILE_MAX_HANDLES_PER_REQUEST",
        hide_env = true,
        value_name = "N",
        default_value_t = 64
    )]
    pub max_handles_per_request: usize,
    /// Hold at most this many HTTP sessions per principal (per client address without
    /// authentication); an `initialize` past it gets 429 with `Retry-After`. Default: no limit.
    #[arg(
        long,
        env = "TURNSTILE_MAX_SESSIONS_PER_PRINCIPAL",
        hide_env = true,
        value_name = "N"
    )]
    pub max_sessions_per_principal: Option<usize>,
    /// Keep at most this many responses held open (event streams and 2026-07-28 listens) per
    /// principal (per client address without authentication); one past it gets 429 with
    /// `Retry-After`. Default: no limit.
    #[arg(
        long,
        env = "TURNSTILE_MAX_STREAMS_PER_PRINCIPAL",
        hide_env = true,
        value_name = "N"
    )]
    pub max_streams_per_principal: Option<usize>,
    /// Let each principal (each client address without authentication) have at most this many
    /// MCP tasks not ended (counted across every server sharing a Redis or PostgreSQL store; on
    /// this server with the embedded or memory store); a call that would start one more is
    /// answered QUOTA_EXCEEDED, and nothing runs. Default: no limit.
    #[arg(
        long,
        env = "TURNSTILE_MAX_TASKS_PER_PRINCIPAL",
        hide_env = true,
        value_name = "N"
    )]
    pub max_tasks_per_principal: Option<usize>,
    /// Let each principal hold at most this many handle-keyed instances in the store (counted
    /// across every server sharing it); a call that would start one more is QUOTA_EXCEEDED.
    /// Needs authentication: without it an instance belongs to no one. Default: no limit.
    #[arg(
        long,
        env = "TURNSTILE_MAX_INSTANCES_PER_PRINCIPAL",
        hide_env = true,
        value_name = "N"
    )]
    pub max_instances_per_principal: Option<u64>,
    /// Let each principal (each client address without authentication) start at most this many
    /// handle-keyed instances per second, on average; a call past it is QUOTA_EXCEEDED with
    /// `retryAfterMs`. Default: no limit.
    #[arg(
        long,
        env = "TURNSTILE_MINT_RATE",
        hide_env = true,
        value_name = "PER_SECOND"
    )]
    pub mint_rate: Option<f64>,
    /// How many instances a principal may start at once under --mint-rate (the burst).
    #[arg(
        long,
        env = "TURNSTILE_MINT_BURST",
        hide_env = true,
        value_name = "N",
        default_value_t = 20
    )]
    pub mint_burst: u32,
    /// The key that seals the `requestState` of 2026-07-28 input-required results (HMAC-SHA256;
    /// at least 32 bytes). Give every server of a deployment the same file, so that any of them
    /// takes a retry; re-read only at start. Default: a random key of this process (a retry
    /// reaching another server is refused).
    #[arg(
        long,
        env = "TURNSTILE_REQUEST_STATE_KEY_FILE",
        hide_env = true,
        value_name = "PATH"
    )]
    pub request_state_key_file: Option<PathBuf>,
    /// What a binding that has a person confirm does for a client that cannot show a form:
    /// `refuse` (INPUT_UNAVAILABLE, nothing runs; on 2026-07-28, -32021 naming the missing
    /// capability) or `allow` (runs without a person; dangerous: the step the confirmation
    /// guards then has none).
    #[arg(
        long,
        env = "TURNSTILE_CONFIRM_FALLBACK",
        hide_env = true,
        value_name = "refuse|allow",
        default_value = "refuse",
        value_parser = ["refuse", "allow"]
    )]
    pub confirm_fallback: String,
    /// How long a sealed `requestState` is honoured, in seconds: a retry after it is refused.
    #[arg(
        long,
        env = "TURNSTILE_REQUEST_STATE_TTL",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 600
    )]
    pub request_state_ttl: u64,
    /// Answer a tool call as timed out (firing nothing) after this many seconds.
    #[arg(
        long,
        env = "TURNSTILE_TOOL_TIMEOUT",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 60
    )]
    pub tool_timeout: u64,
    /// Answer a tool call whose result is over this many bytes of JSON as an error,
    /// RESULT_TOO_LARGE (firing nothing). Default 4 MiB.
    #[arg(
        long,
        env = "TURNSTILE_MAX_RESULT_BYTES",
        hide_env = true,
        value_name = "BYTES",
        default_value_t = DEFAULT_MAX_RESULT_BYTES
    )]
    pub max_result_bytes: usize,
    /// Drop an instance from memory after this many seconds without a call (0: never); it is
    /// reloaded from the store on its next call.
    #[arg(
        long,
        env = "TURNSTILE_IDLE_AFTER",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 600
    )]
    pub idle_after: u64,
    /// On SIGTERM or SIGINT, wait this many seconds for the calls in flight to deliver their
    /// results; calls still running then are answered SHUTTING_DOWN (nothing they would
    /// still change is saved) and the exit code is 1. A second signal exits at once.
    #[arg(
        long,
        env = "TURNSTILE_SHUTDOWN_TIMEOUT",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 30
    )]
    pub shutdown_timeout: u64,
    /// Close an HTTP connection that takes longer than this many seconds to send a request's
    /// headers (or, once opened, its first byte).
    #[arg(
        long,
        env = "TURNSTILE_HEADER_TIMEOUT",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 10
    )]
    pub header_timeout: u64,
    /// Close an HTTP connection whose request body has not arrived in full this many seconds
    /// after the server began to wait for it, or that arrives slower than 1 KiB a second
    /// (averaged, once it has been waited for 2 s); the client gets no answer.
    #[arg(
        long,
        env = "TURNSTILE_BODY_TIMEOUT",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 10
    )]
    pub body_timeout: u64,
    /// Close an HTTP keep-alive connection idle (no request in flight) for this many
    /// seconds. Open event streams are not idle: they get SSE comments meanwhile.
    #[arg(
        long,
        env = "TURNSTILE_KEEPALIVE_TIMEOUT",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 60
    )]
    pub keepalive_timeout: u64,
    /// End an HTTP session whose client sent `initialize` but not `notifications/initialized`
    /// within this many seconds; it then no longer counts against --max-sessions.
    #[arg(
        long,
        env = "TURNSTILE_HANDSHAKE_TIMEOUT",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 10
    )]
    pub handshake_timeout: u64,
    /// Accept at most this many HTTP connections at once; further ones wait in the listen
    /// backlog until one closes, but for a few (8) accepted past it so that `/healthz` and
    /// `/readyz` are answered whatever holds the others (any other request on those waits for a
    /// place, up to --keepalive-timeout, then gets 503). Default: the open-file limit less 256.
    #[arg(
        long,
        env = "TURNSTILE_MAX_CONNECTIONS",
        hide_env = true,
        value_name = "N"
    )]
    pub max_connections: Option<usize>,
    /// Responses held open (a session's GET event stream, a 2026-07-28 `subscriptions/listen`,
    /// the console's live counts) may hold at most this percentage of `--max-connections`;
    /// past it a new one gets 503 with `Retry-After`, so that `initialize` and calls always
    /// find a connection.
    #[arg(
        long,
        env = "TURNSTILE_STREAM_SHARE",
        hide_env = true,
        value_name = "PERCENT",
        default_value_t = 80,
        value_parser = clap::value_parser!(u8).range(1..=100)
    )]
    pub stream_share: u8,
    /// Hold at most this many HTTP sessions; an `initialize` past it gets 503 with
    /// `Retry-After` and a JSON-RPC error saying so. Default: no cap.
    #[arg(
        long,
        env = "TURNSTILE_MAX_SESSIONS",
        hide_env = true,
        value_name = "N"
    )]
    pub max_sessions: Option<usize>,
    /// Run at most this many calls of one plugin at once; a call beyond that is answered
    /// BUSY (with `retryAfterMs`) at once, so a slow or hung plugin saturates only itself.
    #[arg(
        long,
        env = "TURNSTILE_PLUGIN_POOL",
        hide_env = true,
        value_name = "N",
        default_value_t = DEFAULT_POOL_SIZE
    )]
    pub plugin_pool: usize,
    /// Run the plugin named NAME (its manifest's name) in a process of its own: a crash fails
    /// only its calls in flight (PLUGIN_CRASHED) and the process is restarted. Calls cross a
    /// pipe. Repeatable, or comma-separated. A plugin whose manifest says `"isolate": true` is
    /// isolated without it.
    #[arg(
        long = "isolate",
        env = "TURNSTILE_ISOLATE",
        hide_env = true,
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub isolate: Vec<String>,
    /// Serve plugins whose manifest says they are test fixtures (the repository's `testkit` and
    /// `conformance`, whose tools misbehave on purpose, one of them by ending the process).
    /// Without it such a plugin is skipped, with a line in the log.
    #[arg(
        long,
        env = "TURNSTILE_ALLOW_TEST_PLUGINS",
        hide_env = true,
        value_parser = BoolishValueParser::new()
    )]
    pub allow_test_plugins: bool,
    /// Require `Authorization: Bearer TOKEN` on every HTTP route but /healthz and /readyz.
    /// The file holds one `TOKEN` or `NAME TOKEN` per line (`#` comments), followed by the
    /// word `operator` for a token that may use the console at /console; it is read again on
    /// SIGHUP, so tokens rotate without a restart.
    #[arg(
        long,
        env = "TURNSTILE_AUTH_TOKEN_FILE",
        hide_env = true,
        value_name = "PATH"
    )]
    pub auth_token_file: Option<PathBuf>,
    /// Serve a non-loopback address without authentication (otherwise refused at start).
    #[arg(
        long,
        env = "TURNSTILE_ALLOW_UNAUTHENTICATED",
        hide_env = true,
        value_parser = BoolishValueParser::new()
    )]
    pub allow_unauthenticated: bool,
    /// OAuth 2.1 resource-server mode: accept access tokens (JWTs) from this authorization
    /// server, whose signing keys are found through its metadata; tokens must name it as
    /// `iss`. Needs --public-url.
    #[arg(
        long,
        env = "TURNSTILE_OAUTH_ISSUER",
        hide_env = true,
        value_name = "URL"
    )]
    pub oauth_issuer: Option<String>,
    /// The JWK set that signs access tokens, when not from --oauth-issuer's metadata.
    /// Needs --public-url.
    #[arg(
        long,
        env = "TURNSTILE_OAUTH_JWKS",
        hide_env = true,
        value_name = "URL"
    )]
    pub oauth_jwks: Option<String>,
    /// This server's canonical URL as clients reach it (e.g. `https://mcp.example.com/mcp`):
    /// OAuth access tokens must name it as their audience, and the protected-resource
    /// metadata names it.
    #[arg(
        long,
        env = "TURNSTILE_PUBLIC_URL",
        hide_env = true,
        value_name = "URL"
    )]
    pub public_url: Option<String>,
    /// OAuth access tokens granting this scope (in their `scope` or `scp` claim) are
    /// operators': they may use the console at /console. (Token file lines are marked
    /// `operator` instead.) Needs --oauth-issuer or --oauth-jwks.
    #[arg(
        long,
        env = "TURNSTILE_OPERATOR_SCOPE",
        hide_env = true,
        value_name = "SCOPE"
    )]
    pub operator_scope: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key); re-read on SIGHUP.
    #[arg(long, env = "TURNSTILE_TLS_CERT", hide_env = true, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert; re-read on SIGHUP.
    #[arg(long, env = "TURNSTILE_TLS_KEY", hide_env = true, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// Delete a handle-keyed instance this many seconds after it reached a final state
    /// (default 7 days; 0 keeps them). Works on every store.
    #[arg(
        long,
        env = "TURNSTILE_RETAIN_FINAL",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 604_800
    )]
    pub retain_final: u64,
    /// Delete a handle-keyed instance, in whatever state, this many seconds after its last
    /// transition (default 0: never). Works on every store.
    #[arg(
        long,
        env = "TURNSTILE_INSTANCE_TTL",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 0
    )]
    pub instance_ttl: u64,
    /// Keep a tombstone of each deleted instance (who deleted it, when, its last state and
    /// version) this many days, for `turnstile instances show` and the console (default 30;
    /// 0 keeps none).
    #[arg(
        long,
        env = "TURNSTILE_TOMBSTONE_DAYS",
        hide_env = true,
        value_name = "DAYS",
        default_value_t = crate::store::DEFAULT_TOMBSTONE_DAYS
    )]
    pub tombstone_days: u64,
    /// A tools/call retried with the same `_meta.idempotencyKey` on the same instance
    /// within this many seconds gets the first call's result instead of running again.
    #[arg(
        long,
        env = "TURNSTILE_IDEMPOTENCY_WINDOW",
        hide_env = true,
        value_name = "SECS",
        default_value_t = 600
    )]
    pub idempotency_window: u64,
    /// The largest record an instance may save, in bytes (its state, context, remembered
    /// idempotent results and the audit entry the save appends, as JSON): a call whose result
    /// would make it larger is answered RECORD_TOO_LARGE and saves and fires nothing; one whose
    /// arguments and confirmation alone are larger is refused before its plugin runs.
    #[arg(
        long,
        env = "TURNSTILE_MAX_RECORD_BYTES",
        hide_env = true,
        value_name = "BYTES",
        default_value_t = crate::store::DEFAULT_MAX_RECORD_BYTES
    )]
    pub max_record_bytes: usize,
    /// With a store several servers share: how long a server's lease on an instance lives
    /// unless renewed, which is how long a server that crashed or paused keeps calls on its
    /// instances waiting. Keep it below --lease-wait, so that such calls outwait it rather than
    /// being answered BUSY (see docs/several-servers.md).
    #[arg(
        long,
        env = "TURNSTILE_LEASE_TTL",
        hide_env = true,
        value_name = "MS",
        default_value_t = 1500,
        value_parser = clap::value_parser!(u64).range(100..)
    )]
    pub lease_ttl: u64,
    /// With a store several servers share: how long a call waits for another server's lease on
    /// its instance before it is answered BUSY (with retryAfterMs), its handler not run.
    #[arg(
        long,
        env = "TURNSTILE_LEASE_WAIT",
        hide_env = true,
        value_name = "MS",
        default_value_t = 2000
    )]
    pub lease_wait: u64,
    /// With a store several servers share: how long an instance goes without calls before its
    /// server gives up the lease, so that calls at other servers need not wait for it.
    #[arg(
        long,
        env = "TURNSTILE_LEASE_IDLE",
        hide_env = true,
        value_name = "MS",
        default_value_t = 20
    )]
    pub lease_idle: u64,
    /// Export each tool call's span, with its plugin call and store save as child spans, and
    /// each timer firing as a trace of its own, to this OpenTelemetry collector: OTLP over HTTP
    /// with protobuf, the collector's base URL (`http://HOST:4318`; `/v1/traces` is added) or
    /// its full traces URL. A W3C `traceparent` in a call's `_meta` or HTTP header is
    /// continued. Default: nothing is exported.
    #[arg(
        long,
        env = "TURNSTILE_OTLP_ENDPOINT",
        hide_env = true,
        value_name = "URL"
    )]
    pub otlp_endpoint: Option<String>,
    /// With --otlp-endpoint: the share of traces exported, from 0 to 1. A call continuing a
    /// client's trace follows that trace's sampling decision instead.
    #[arg(
        long,
        env = "TURNSTILE_OTLP_SAMPLE_RATIO",
        hide_env = true,
        value_name = "RATIO",
        default_value_t = 1.0
    )]
    pub otlp_sample_ratio: f64,
    /// `--log-format`, a global flag of `turnstile` (every subcommand logs); here so that the
    /// file may set it too. The layers fill it in from the global flag.
    #[arg(skip)]
    pub log_format: LogFormat,
    /// The config file's `[plugin.<name>]` tables, by name as written. Only a file gives them;
    /// the environment's `TURNSTILE_PLUGIN_<NAME>_<KEY>` join them when a plugin is loaded.
    /// Never serialized: their values may be secrets (`--print-config` shows them redacted).
    #[arg(skip)]
    #[serde(skip_serializing)]
    pub plugin: PluginTables,
}

/// The `[plugin.<name>]` tables as the file has them, by name as written.
#[derive(Deserialize, Clone, Default, PartialEq)]
#[serde(transparent)]
pub struct PluginTables(pub BTreeMap<String, toml::Table>);

/// Names and keys only: the values may be secrets.
impl fmt::Debug for PluginTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.0
                    .iter()
                    .map(|(name, table)| (name, table.keys().collect::<Vec<_>>())),
            )
            .finish()
    }
}

/// What the settings cannot be, together. Each names the keys involved; `layers` says where
/// each value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A required setting is missing.
    Missing(&'static str),
    /// Two settings exclude each other.
    Conflict(&'static str, &'static str),
    /// The first setting needs the second.
    Needs(&'static str, &'static str),
    /// A setting that names something is empty (an empty variable, say).
    Empty(&'static str),
    /// A number outside its range (the second: the range, in words).
    OutOfRange(&'static str, &'static str),
}

impl ServeSettings {
    /// Checks the relations between settings: what clap would check for flags alone, on the
    /// merged values.
    pub fn check(&self) -> Result<(), Problem> {
        if self.plugins.is_none() {
            return Err(Problem::Missing("plugins"));
        }
        if self.state_handle_key.as_deref() == Some("") {
            return Err(Problem::Empty("state-handle-key"));
        }
        if self.otlp_endpoint.as_deref() == Some("") {
            return Err(Problem::Empty("otlp-endpoint"));
        }
        if !(0.0..=1.0).contains(&self.otlp_sample_ratio) {
            return Err(Problem::OutOfRange("otlp-sample-ratio", "from 0 to 1"));
        }
        if self.stdio && self.http.is_some() {
            return Err(Problem::Conflict("stdio", "http"));
        }
        if self.stdio && self.stateless {
            return Err(Problem::Conflict("stdio", "stateless"));
        }
        if self.oauth_issuer.is_some() && self.public_url.is_none() {
            return Err(Problem::Needs("oauth-issuer", "public-url"));
        }
        if self.oauth_jwks.is_some() && self.public_url.is_none() {
            return Err(Problem::Needs("oauth-jwks", "public-url"));
        }
        if self.operator_scope.is_some() && self.oauth_issuer.is_none() && self.oauth_jwks.is_none()
        {
            return Err(Problem::Needs(
                "operator-scope",
                "oauth-issuer or oauth-jwks",
            ));
        }
        // 0 s would close every connection that sends a body before the body came.
        if self.body_timeout == 0 {
            return Err(Problem::OutOfRange("body-timeout", "at least 1 (seconds)"));
        }
        // Without authentication an instance belongs to no one: the limit would count nothing.
        if self.max_instances_per_principal.is_some()
            && self.auth_token_file.is_none()
            && self.oauth_issuer.is_none()
        {
            return Err(Problem::Needs(
                "max-instances-per-principal",
                "auth-token-file or oauth-issuer",
            ));
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => Err(Problem::Needs("tls-cert", "tls-key")),
            (None, Some(_)) => Err(Problem::Needs("tls-key", "tls-cert")),
            _ => Ok(()),
        }
    }

    /// What the server runs with. `plugin_configs` are the `[plugin.<name>]` tables, checked.
    /// Call after [`ServeSettings::check`].
    pub fn into_options(self, plugin_configs: PluginConfigs) -> ServeOptions {
        // The default store lives in the data directory; over stdio the default is `memory:`.
        let data_dir =
            (self.store.is_none() && !self.stdio).then(|| serve::data_dir(self.data_dir));
        let secs = Duration::from_secs;
        ServeOptions {
            // `check` refuses settings without it.
            plugins: self.plugins.unwrap_or_default(),
            plugin_configs,
            plugin_pool: self.plugin_pool,
            allow_test_plugins: self.allow_test_plugins,
            isolation: isolation(self.isolate, self.log_format),
            retain_final: (self.retain_final > 0).then(|| secs(self.retain_final)),
            instance_ttl: (self.instance_ttl > 0).then(|| secs(self.instance_ttl)),
            tombstone_days: self.tombstone_days,
            shutdown_timeout: secs(self.shutdown_timeout),
            next_step: self.next_step,
            list_ttl: secs(self.list_ttl),
            max_handles_per_request: self.max_handles_per_request,
            request_state_key_file: self.request_state_key_file,
            request_state_ttl: secs(self.request_state_ttl.max(1)),
            confirm_fallback: self.confirm_fallback == "allow",
            quotas: mcp::QuotaLimits {
                sessions: self.max_sessions_per_principal,
                streams: self.max_streams_per_principal,
                mint_rate: self.mint_rate.filter(|rate| *rate > 0.0),
                mint_burst: f64::from(self.mint_burst),
                instances: self.max_instances_per_principal,
                tasks: self.max_tasks_per_principal,
            },
            transport: match (self.stdio, self.http) {
                (true, _) => Transport::Stdio,
                (false, address) => Transport::Http(
                    address.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
                ),
            },
            store: self.store.unwrap_or_else(|| match &data_dir {
                Some(dir) => serve::default_store(dir),
                None => "memory:".to_string(),
            }),
            data_dir,
            store_namespace: self.store_namespace,
            audit_keep: self.audit_keep,
            redis_wait_replicas: self.redis_wait_replicas,
            http: HttpOptions {
                session_idle_timeout: secs(self.session_idle_timeout),
                session_passivate_after: (self.session_passivate_after > 0)
                    .then(|| secs(self.session_passivate_after)),
                allowed_hosts: self.allowed_hosts,
                allowed_origins: self.allowed_origins,
                stateless: self.stateless,
                connections: ConnectionLimits {
                    max_connections: self
                        .max_connections
                        .unwrap_or_else(mcp::default_max_connections),
                    header_timeout: secs(self.header_timeout),
                    body_timeout: secs(self.body_timeout),
                    keepalive_timeout: secs(self.keepalive_timeout),
                    stream_share: self.stream_share,
                },
                handshake_timeout: secs(self.handshake_timeout),
                max_sessions: self.max_sessions,
                auth_token_file: self.auth_token_file,
                allow_unauthenticated: self.allow_unauthenticated,
                oauth: (self.oauth_issuer.is_some() || self.oauth_jwks.is_some()).then(|| {
                    OAuthOptions {
                        issuer: self.oauth_issuer,
                        jwks: self.oauth_jwks,
                        // `check` refuses OAuth without it.
                        public_url: self.public_url.unwrap_or_default(),
                        operator_scope: self.operator_scope,
                    }
                }),
                tls: self
                    .tls_cert
                    .zip(self.tls_key)
                    .map(|(cert, key)| TlsFiles { cert, key }),
            },
            handles: self
                .state_handle_key
                .or_else(|| self.stateless.then(|| mcp::DEFAULT_HANDLE_KEY.to_string()))
                .map(|key| HandleMode { key }),
            actors: ActorOptions {
                idle_after: (self.idle_after > 0).then(|| secs(self.idle_after)),
                tool_timeout: secs(self.tool_timeout),
                max_result_bytes: self.max_result_bytes,
                idempotency_window: secs(self.idempotency_window),
                max_record_bytes: self.max_record_bytes,
                leases: LeaseSettings {
                    ttl: Duration::from_millis(self.lease_ttl),
                    wait: Duration::from_millis(self.lease_wait),
                    idle: Duration::from_millis(self.lease_idle),
                },
                ..Default::default()
            },
        }
    }
}

/// How `serve` starts the processes of isolated plugins: this same executable, as
/// `plugin-host`, logging as the server does.
fn isolation(names: Vec<String>, log_format: LogFormat) -> crate::plugin::Isolation {
    // On Linux, `/proc/self/exe` is the file this process runs even if it was replaced or
    // deleted since (an upgrade in place): a restarted plugin process never runs a newer
    // `turnstile` than the server it talks to.
    let program = if cfg!(target_os = "linux") {
        std::path::PathBuf::from("/proc/self/exe")
    } else {
        std::env::current_exe().unwrap_or_else(|_| std::path::PathBuf::from("turnstile"))
    };
    let args = match log_format {
        LogFormat::Text => Vec::new(),
        LogFormat::Json => vec!["--log-format".into(), "json".into()],
    };
    crate::plugin::Isolation {
        names: names.into_iter().collect(),
        program,
        args,
    }
}

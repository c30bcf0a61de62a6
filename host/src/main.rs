//! The `turnstile` command line: `serve`, `check`, `machine run`, `graph`, `load` (and the hidden
//! `plugin-host`, the process of an isolated plugin).

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand, ValueEnum};
use turnstile::commands;

#[derive(Parser)]
#[command(
    name = "turnstile",
    version,
    about = "An MCP server whose tools follow workflow state machines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines (on stderr) are written: `text`, or `json` (one object per line) for log
    /// shippers. Which lines: `RUST_LOG`, default `info`.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        env = "TURNSTILE_LOG_FORMAT"
    )]
    log_format: turnstile::logs::LogFormat,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // Parsed once at startup: `serve`'s flags are the size.
enum Command {
    /// Serve the tools of every plugin in a directory over MCP.
    Serve {
        /// Directory of plugin shared libraries to load.
        #[arg(long, env = "TURNSTILE_PLUGINS")]
        plugins: PathBuf,
        /// Serve one client over stdin/stdout.
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Serve Streamable HTTP on this address, endpoint `/mcp` (default 127.0.0.1:8080).
        #[arg(long)]
        http: Option<SocketAddr>,
        /// Where instance state lives: `memory:`, `embedded:PATH`, `redis://…`, `postgres://…`.
        /// Default over HTTP: the embedded store, `state.redb` in the data directory. Default over
        /// stdio: `memory:`, since a stdio connection is one session whose instances end with it
        /// (and several stdio servers may run at once); name a store to keep handle-keyed state.
        #[arg(long, env = "TURNSTILE_STORE")]
        store: Option<String>,
        /// Names this deployment's data in a shared store: Redis keys `NAMESPACE:…`, PostgreSQL
        /// table `NAMESPACE_instances`. Servers that share instances use the same one.
        #[arg(long, env = "TURNSTILE_STORE_NAMESPACE", default_value = "turnstile")]
        store_namespace: String,
        /// Directory for the embedded store (created on first start). Default:
        /// `$XDG_DATA_HOME/turnstile`, else `~/.local/share/turnstile`.
        #[arg(long, env = "TURNSTILE_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// End an HTTP session after this many seconds without a request.
        #[arg(long, default_value_t = 300)]
        session_idle_timeout: u64,
        /// Also accept this `Host` header on HTTP (loopback is always accepted). Repeatable.
        #[arg(long = "allowed-host")]
        allowed_hosts: Vec<String>,
        /// Also accept requests from this browser `Origin` on HTTP, as `scheme://host[:port]`
        /// (`:*` for any port); loopback origins are accepted when serving on loopback, a request
        /// from any other origin is refused (403). Repeatable.
        #[arg(long = "allowed-origin", value_name = "URL")]
        allowed_origins: Vec<String>,
        /// Handle mode: instances are named by a handle the client passes as this tool argument
        /// (or in a request's `_meta`), minted when it starts a workflow. Without a value the
        /// name is `handle`.
        #[arg(long, num_args = 0..=1, default_missing_value = turnstile::mcp::DEFAULT_HANDLE_KEY)]
        state_handle_key: Option<String>,
        /// HTTP without sessions (for deployment behind a load balancer): every request stands
        /// alone and handles carry all state. Implies handle mode.
        #[arg(long, conflicts_with = "stdio")]
        stateless: bool,
        /// Answer a tool call as timed out (firing nothing) after this many seconds.
        #[arg(long, default_value_t = 60)]
        tool_timeout: u64,
        /// Answer a tool call whose result is over this many bytes of JSON as an error,
        /// RESULT_TOO_LARGE (firing nothing). Default 4 MiB.
        #[arg(long, default_value_t = turnstile::invoke::DEFAULT_MAX_RESULT_BYTES)]
        max_result_bytes: usize,
        /// Drop an instance from memory after this many seconds without a call (0: never); it is
        /// reloaded from the store on its next call.
        #[arg(long, default_value_t = 600)]
        idle_after: u64,
        /// On SIGTERM or SIGINT, wait this many seconds for the calls in flight to deliver their
        /// results; calls still running then are answered SHUTTING_DOWN (nothing they would
        /// still change is saved) and the exit code is 1. A second signal exits at once.
        #[arg(long, default_value_t = 30)]
        shutdown_timeout: u64,
        /// Close an HTTP connection that takes longer than this many seconds to send a request's
        /// headers (or, once opened, its first byte).
        #[arg(long, default_value_t = 10)]
        header_timeout: u64,
        /// Close an HTTP keep-alive connection idle (no request in flight) for this many
        /// seconds. Open event streams are not idle: they get SSE comments meanwhile.
        #[arg(long, default_value_t = 60)]
        keepalive_timeout: u64,
        /// End an HTTP session whose client sent `initialize` but not `notifications/initialized`
        /// within this many seconds; it then no longer counts against --max-sessions.
        #[arg(long, default_value_t = 10)]
        handshake_timeout: u64,
        /// Accept at most this many HTTP connections at once; further ones wait in the listen
        /// backlog until one closes. Default: the open-file limit less 256.
        #[arg(long)]
        max_connections: Option<usize>,
        /// Hold at most this many HTTP sessions; an `initialize` past it gets 503 with
        /// `Retry-After` and a JSON-RPC error saying so. Default: no cap.
        #[arg(long)]
        max_sessions: Option<usize>,
        /// Run at most this many calls of one plugin at once; a call beyond that is answered
        /// BUSY (with `retryAfterMs`) at once, so a slow or hung plugin saturates only itself.
        #[arg(long, default_value_t = turnstile::plugin::DEFAULT_POOL_SIZE)]
        plugin_pool: usize,
        /// Run the plugin named NAME (its manifest's name) in a process of its own: a crash
        /// fails only its calls in flight (PLUGIN_CRASHED) and the process is restarted. Calls
        /// cross a pipe. Repeatable. A plugin whose manifest says `"isolate": true` is isolated
        /// without it.
        #[arg(long = "isolate", value_name = "NAME")]
        isolate: Vec<String>,
        /// Require `Authorization: Bearer TOKEN` on every HTTP route but /healthz and /readyz.
        /// The file holds one `TOKEN` or `NAME TOKEN` per line (`#` comments); it is read again
        /// on SIGHUP, so tokens rotate without a restart.
        #[arg(long, env = "TURNSTILE_AUTH_TOKEN_FILE", value_name = "PATH")]
        auth_token_file: Option<PathBuf>,
        /// Serve a non-loopback address without authentication (otherwise refused at start).
        #[arg(long)]
        allow_unauthenticated: bool,
        /// OAuth 2.1 resource-server mode: accept access tokens (JWTs) from this authorization
        /// server, whose signing keys are found through its metadata; tokens must name it as
        /// `iss`. Needs --public-url.
        #[arg(
            long,
            env = "TURNSTILE_OAUTH_ISSUER",
            value_name = "URL",
            requires = "public_url"
        )]
        oauth_issuer: Option<String>,
        /// The JWK set that signs access tokens, when not from --oauth-issuer's metadata.
        /// Needs --public-url.
        #[arg(
            long,
            env = "TURNSTILE_OAUTH_JWKS",
            value_name = "URL",
            requires = "public_url"
        )]
        oauth_jwks: Option<String>,
        /// This server's canonical URL as clients reach it (e.g. `https://mcp.example.com/mcp`):
        /// OAuth access tokens must name it as their audience, and the protected-resource
        /// metadata names it.
        #[arg(long, env = "TURNSTILE_PUBLIC_URL", value_name = "URL")]
        public_url: Option<String>,
        /// Serve HTTPS with this PEM certificate chain (needs --tls-key); re-read on SIGHUP.
        #[arg(long, value_name = "PEM", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The PEM private key of --tls-cert; re-read on SIGHUP.
        #[arg(long, value_name = "PEM", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Delete a handle-keyed instance this many seconds after it reached a final state
        /// (default 7 days; 0 keeps them). Works on every store.
        #[arg(long, default_value_t = 604_800)]
        retain_final: u64,
        /// Delete a handle-keyed instance, in whatever state, this many seconds after its last
        /// transition (default 0: never). Works on every store.
        #[arg(long, default_value_t = 0)]
        instance_ttl: u64,
        /// A tools/call retried with the same `_meta.idempotencyKey` on the same instance
        /// within this many seconds gets the first call's result instead of running again.
        #[arg(long, value_name = "SECS", default_value_t = 600)]
        idempotency_window: u64,
    },
    /// Load every plugin in a directory and report every problem; exit 1 if there is one.
    /// Workflow graph problems (unreachable states, stuck states, ...) are warnings.
    Check {
        #[arg(long, env = "TURNSTILE_PLUGINS")]
        plugins: PathBuf,
        /// Treat workflow graph warnings as errors.
        #[arg(long)]
        strict: bool,
    },
    /// Debug a machine: print its initial snapshot, then step it with events read from stdin.
    Machine {
        #[command(subcommand)]
        command: MachineCommand,
    },
    /// Load any MCP server over Streamable HTTP and check the gating contract meanwhile; exit 1
    /// on a violation, 2 on a usage or connection error.
    Load(commands::load::LoadArgs),
    /// The process an isolated plugin runs in; started by `serve`, not by hand.
    #[command(hide = true)]
    PluginHost {
        /// The plugin library to load.
        library: PathBuf,
    },
    /// Draw each workflow, with the tools visible in each state.
    Graph {
        #[arg(long, env = "TURNSTILE_PLUGINS")]
        plugins: PathBuf,
        #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
        format: GraphFormat,
    },
}

#[derive(Subcommand)]
enum MachineCommand {
    /// Reads events as JSON lines (`"SUBMIT"` or `{"type":"SUBMIT","input":{..}}`) and
    /// `{"advance": MS}` clock moves, prints one line per input line.
    Run {
        file: PathBuf,
        /// The instance's initial context (a JSON object) instead of the machine's.
        #[arg(long)]
        context: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum GraphFormat {
    Mermaid,
    Dot,
}

/// How `serve` starts the processes of isolated plugins: this same executable, as
/// `plugin-host`, logging as the server does.
fn isolation(
    names: Vec<String>,
    log_format: turnstile::logs::LogFormat,
) -> turnstile::plugin::Isolation {
    // On Linux, `/proc/self/exe` is the file this process runs even if it was replaced or
    // deleted since (an upgrade in place): a restarted plugin process never runs a newer
    // `turnstile` than the server it talks to.
    let program = if cfg!(target_os = "linux") {
        PathBuf::from("/proc/self/exe")
    } else {
        std::env::current_exe().unwrap_or_else(|_| PathBuf::from("turnstile"))
    };
    let args = match log_format {
        turnstile::logs::LogFormat::Text => Vec::new(),
        turnstile::logs::LogFormat::Json => vec!["--log-format".into(), "json".into()],
    };
    turnstile::plugin::Isolation {
        names: names.into_iter().collect(),
        program,
        args,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    turnstile::logs::init(cli.log_format);
    let outcome = match cli.command {
        Command::Serve {
            plugins,
            stdio,
            http,
            store,
            data_dir,
            store_namespace,
            session_idle_timeout,
            allowed_hosts,
            allowed_origins,
            idle_after,
            tool_timeout,
            max_result_bytes,
            state_handle_key,
            stateless,
            shutdown_timeout,
            header_timeout,
            keepalive_timeout,
            handshake_timeout,
            max_connections,
            max_sessions,
            plugin_pool,
            isolate,
            auth_token_file,
            allow_unauthenticated,
            oauth_issuer,
            oauth_jwks,
            public_url,
            tls_cert,
            tls_key,
            retain_final,
            instance_ttl,
            idempotency_window,
        } => {
            // The default store lives in the data directory; over stdio the default is `memory:`.
            let data_dir = (store.is_none() && !stdio).then(|| commands::serve::data_dir(data_dir));
            commands::serve::run(commands::serve::ServeOptions {
                plugin_pool,
                isolation: isolation(isolate, cli.log_format),
                retain_final: (retain_final > 0).then(|| Duration::from_secs(retain_final)),
                instance_ttl: (instance_ttl > 0).then(|| Duration::from_secs(instance_ttl)),
                shutdown_timeout: Duration::from_secs(shutdown_timeout),
                plugins,
                transport: match (stdio, http) {
                    (true, _) => commands::serve::Transport::Stdio,
                    (false, address) => commands::serve::Transport::Http(
                        address.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
                    ),
                },
                store: store.unwrap_or_else(|| match &data_dir {
                    Some(dir) => commands::serve::default_store(dir),
                    None => "memory:".to_string(),
                }),
                data_dir,
                store_namespace,
                http: turnstile::mcp::HttpOptions {
                    session_idle_timeout: Duration::from_secs(session_idle_timeout),
                    allowed_hosts,
                    allowed_origins,
                    stateless,
                    connections: turnstile::mcp::ConnectionLimits {
                        max_connections: max_connections
                            .unwrap_or_else(turnstile::mcp::default_max_connections),
                        header_timeout: Duration::from_secs(header_timeout),
                        keepalive_timeout: Duration::from_secs(keepalive_timeout),
                    },
                    handshake_timeout: Duration::from_secs(handshake_timeout),
                    max_sessions,
                    auth_token_file,
                    allow_unauthenticated,
                    oauth: (oauth_issuer.is_some() || oauth_jwks.is_some()).then(|| {
                        turnstile::mcp::OAuthOptions {
                            issuer: oauth_issuer,
                            jwks: oauth_jwks,
                            // clap makes --public-url required with either OAuth flag.
                            public_url: public_url.unwrap_or_default(),
                        }
                    }),
                    tls: tls_cert
                        .zip(tls_key)
                        .map(|(cert, key)| turnstile::mcp::TlsFiles { cert, key }),
                },
                handles: state_handle_key
                    .or_else(|| stateless.then(|| turnstile::mcp::DEFAULT_HANDLE_KEY.to_string()))
                    .map(|key| turnstile::mcp::HandleMode { key }),
                actors: turnstile::actors::ActorOptions {
                    idle_after: (idle_after > 0).then(|| Duration::from_secs(idle_after)),
                    tool_timeout: Duration::from_secs(tool_timeout),
                    max_result_bytes,
                    idempotency_window: Duration::from_secs(idempotency_window),
                    ..Default::default()
                },
            })
        }
        Command::Check { plugins, strict } => commands::check::run(&plugins, strict),
        Command::PluginHost { library } => commands::plugin_host::run(&library),
        Command::Load(args) => commands::load::run(args),
        Command::Machine {
            command: MachineCommand::Run { file, context },
        } => commands::machine::run(
            &file,
            context.as_deref(),
            std::io::stdin().lock(),
            std::io::stdout().lock(),
        ),
        Command::Graph { plugins, format } => commands::graph::run(
            &plugins,
            match format {
                GraphFormat::Mermaid => turnstile::statechart::diagram::DiagramFormat::Mermaid,
                GraphFormat::Dot => turnstile::statechart::diagram::DiagramFormat::Dot,
            },
        ),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("turnstile: {error:#}");
            ExitCode::FAILURE
        }
    }
}

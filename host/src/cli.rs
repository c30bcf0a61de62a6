//! The `turnstile` command line: `serve`, `check`, `instances`, `machine run`, `graph`, `load`,
//! `new-plugin`, `new-upstream` (and the hidden `plugin-host`, the process of an isolated plugin).
//!
//! It lives in the library, not the binary, so that a program built on the host can be
//! `turnstile` with stores of its own ([`main_with`], [`Turnstile`]): every subcommand, flag,
//! config key and the console, and `--store SCHEME://…` opening what it registered. The
//! `turnstile` binary is [`main`] and nothing else.

use std::{ffi::OsString, path::PathBuf, process::ExitCode};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

pub use crate::store::Stores;
use crate::{commands, config};

/// The `turnstile` binary: the command line with the built-in stores only.
pub fn main() -> ExitCode {
    Turnstile::new().main()
}

/// `turnstile`, with the stores `add_stores` registers beside the built-in ones: what a user's
/// own binary calls to serve with its store, e.g.
///
/// ```no_run
/// # use turnstile::store::{MemoryStore, StoreOptions, StoreError};
/// # async fn open(_url: String, _options: StoreOptions) -> Result<MemoryStore, StoreError> { Ok(MemoryStore::new()) }
/// fn main() -> std::process::ExitCode {
///     turnstile::cli::main_with(|stores| {
///         stores.register("mysql", open);
///     })
/// }
/// ```
pub fn main_with(add_stores: impl FnOnce(&mut Stores)) -> ExitCode {
    Turnstile::new().stores(add_stores).main()
}

/// The command line as a value, for a program that runs Turnstile inside itself: give it the
/// stores it may open, then run it with the arguments of your choosing (the plugin directory,
/// `--store` naming your store, any other flag or a config file), e.g.
/// `Turnstile::new().stores(|s| { s.register("nats", open); }).run(["turnstile", "serve",
/// "--plugins", dir, "--store", "nats://127.0.0.1:4222", "--http", "127.0.0.1:8080"])`.
///
/// `run` blocks until the command ends (for `serve`: a signal, SIGTERM or SIGINT, and the drain
/// after it), and starts its own runtime, so call it from a thread that is not running one
/// (a `std::thread::spawn`, or `main` before any runtime starts). The stores are this process's
/// for good once it runs: a process runs one Turnstile.
#[derive(Default)]
pub struct Turnstile {
    stores: Stores,
}

impl Turnstile {
    /// The command line with the built-in stores only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the stores `add_stores` registers (see [`Stores::register`]).
    pub fn stores(mut self, add_stores: impl FnOnce(&mut Stores)) -> Self {
        add_stores(&mut self.stores);
        self
    }

    /// Runs the command line of this process (`std::env::args_os`).
    pub fn main(self) -> ExitCode {
        self.run(std::env::args_os())
    }

    /// Runs the command `args` name (the first is the program's name, as in `argv`): parsing
    /// errors and `--help` print and exit as `turnstile` does.
    pub fn run<I, T>(self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        if self.stores.install().is_err() {
            eprintln!("turnstile: this process runs Turnstile already; its stores are set");
            return ExitCode::FAILURE;
        }
        run_command_line(args)
    }
}

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
    log_format: crate::logs::LogFormat,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // Parsed once at startup: `serve`'s flags are the size.
enum Command {
    /// Serve the tools of every plugin in a directory over MCP.
    Serve(config::ServeArgs),
    /// Load every plugin in a directory and report every problem; exit 1 if there is one.
    /// Workflow graph problems (unreachable states, stuck states, ...) are warnings.
    Check {
        #[arg(long, env = "TURNSTILE_PLUGINS")]
        plugins: PathBuf,
        /// Treat workflow graph warnings as errors (and, with `--store`, instances that would
        /// not run on the served machine versions).
        #[arg(long)]
        strict: bool,
        /// Also say what serving these plugins would do to the instances in this store (which
        /// continue, move to a changed machine, or stay pinned to their version).
        #[arg(long, value_name = "URL")]
        store: Option<String>,
        /// The deployment's namespace in a shared store (as given to `serve`).
        #[arg(long, default_value = "turnstile")]
        store_namespace: String,
    },
    /// Lists, shows, resets and deletes workflow instances in a store.
    Instances(commands::instances::InstancesArgs),
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
    /// Draw each workflow (or the one named), with the tools visible and the prompts and
    /// resources offered in each state.
    ///
    /// Mermaid and DOT print every workflow, each titled with its id; an SVG is one picture of
    /// one workflow, so with several loaded name the one to draw.
    Graph {
        #[arg(long, env = "TURNSTILE_PLUGINS")]
        plugins: PathBuf,
        /// The workflow to draw, by id (default: every one).
        workflow: Option<String>,
        #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
        format: GraphFormat,
        /// With `--format svg`: light up this state (a dot path like `review` or
        /// `payment.pending`, or `#id`), as an operator would see an instance's current state.
        /// Give it once per state to light several (an instance in a parallel state is in one
        /// state per region), or give an instance's whole state value as JSON
        /// (`{"work":{"shipping":"packing","billing":"unpaid"}}`, as `turnstile instances show`
        /// prints it) to light every state it is in.
        #[arg(long, value_name = "STATE")]
        highlight: Vec<String>,
    },
    /// Write a new plugin, built outside this repository: a Rust crate on the SDK (or a C
    /// project on the header) with a workflow of three states, its tools and a test.
    NewPlugin {
        /// The plugin's name, which starts its tools' names (`NAME.start`): lowercase letters,
        /// digits and `_`.
        name: String,
        #[arg(long, value_enum, default_value_t = commands::new_plugin::Lang::Rust)]
        lang: commands::new_plugin::Lang,
        /// Where to write it (default: `./NAME`); must not exist yet.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The SDK crate to depend on, by path (default: the copy of the SDK this turnstile
        /// carries, written beside the plugin in `turnstile-sdk/`).
        #[arg(long, value_name = "DIR")]
        sdk: Option<PathBuf>,
    },
    /// Gate an MCP server that exists already: connect to it, list its tools, and write
    /// `NAME.upstream.toml` and a machine of one state offering them all, to split into steps.
    NewUpstream {
        /// The upstream's name, which starts its tools' names (`NAME.TOOL`).
        name: String,
        /// Where to write the two files (default: the current directory, e.g. the plugin
        /// directory); neither may exist yet.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The server's Streamable HTTP endpoint, instead of a command.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// The command that starts the server over stdio, after `--`.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
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
    /// Mermaid `stateDiagram-v2` source.
    Mermaid,
    /// Graphviz DOT source.
    Dot,
    /// A finished picture: nested boxes laid out by turnstile itself (no Graphviz needed).
    Svg,
}

fn run_command_line<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    // The process's rustls provider is ring (the server's TLS and OAuth name it themselves).
    // reqwest, built without a provider of its own, takes this one for every client it builds,
    // TLS or not: without it, building one (`turnstile load`'s, the `--otlp-endpoint`
    // exporter's) would panic. (`instances --server` gives its client a configuration of its own.)
    let _ = rustls::crypto::ring::default_provider().install_default();
    let matches = Cli::command().get_matches_from(args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    let outcome = match cli.command {
        Command::Serve(args) => {
            // The settings come first: the file may set the log format.
            let serve_matches = matches
                .subcommand_matches("serve")
                .expect("clap parsed the serve subcommand");
            let print = args.print_config;
            let resolved = match args.resolve(serve_matches, cli.log_format) {
                Ok(resolved) => resolved,
                Err(error) => {
                    eprintln!("turnstile serve: {error}");
                    return ExitCode::from(2);
                }
            };
            if print {
                return match resolved.to_toml() {
                    Ok(text) => {
                        print!("{text}");
                        ExitCode::SUCCESS
                    }
                    Err(error) => {
                        eprintln!("turnstile serve: {error}");
                        ExitCode::from(2)
                    }
                };
            }
            // The runtime first: a trace exporter's batch task runs on it.
            let runtime = match commands::serve::runtime() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("turnstile serve: {error:#}");
                    return ExitCode::FAILURE;
                }
            };
            let traces = {
                let _inside = runtime.enter();
                crate::logs::init_serving(resolved.log_format(), resolved.otlp().as_ref())
            };
            let traces = match traces {
                Ok(traces) => traces,
                Err(error) => {
                    eprintln!("turnstile serve: --otlp-endpoint: {error}");
                    return ExitCode::from(2);
                }
            };
            if let Some(file) = &resolved.file {
                tracing::info!(file = %file.display(), "settings read from the config file");
            }
            commands::serve::run(runtime, resolved.into_options(), traces)
        }
        command => {
            crate::logs::init(cli.log_format);
            run(command)
        }
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("turnstile: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Every subcommand but `serve`, whose settings have layers of their own.
fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(_) => unreachable!("`main` runs serve"),
        Command::Check {
            plugins,
            strict,
            store,
            store_namespace,
        } => commands::check::run(
            &plugins,
            strict,
            store.map(|url| (url, store_namespace)).as_ref(),
        ),
        Command::Load(args) => commands::load::run(args),
        Command::Instances(args) => commands::instances::run_cli(args),
        Command::PluginHost { library } => commands::plugin_host::run(&library),
        Command::Machine {
            command: MachineCommand::Run { file, context },
        } => commands::machine::run(
            &file,
            context.as_deref(),
            std::io::stdin().lock(),
            std::io::stdout().lock(),
        ),
        Command::Graph {
            plugins,
            workflow,
            format,
            highlight,
        } => commands::graph::run(
            &plugins,
            workflow.as_deref(),
            match format {
                GraphFormat::Mermaid => crate::statechart::diagram::DiagramFormat::Mermaid,
                GraphFormat::Dot => crate::statechart::diagram::DiagramFormat::Dot,
                GraphFormat::Svg => crate::statechart::diagram::DiagramFormat::Svg,
            },
            &highlight,
        ),
        Command::NewPlugin {
            name,
            lang,
            dir,
            sdk,
        } => commands::new_plugin::run(&name, lang, dir.as_deref(), sdk.as_deref()),
        Command::NewUpstream {
            name,
            dir,
            url,
            command,
        } => commands::new_upstream::run(&name, dir.as_deref(), &command, url.as_deref()),
    }
}

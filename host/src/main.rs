//! The `turnstile` binary: the command line of `cli.rs`, with the built-in stores.

fn main() -> std::process::ExitCode {
    turnstile::cli::main()
}

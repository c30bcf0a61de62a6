//! Turnstile inside a program of yours (`docs/stores.md`, "Serving, and embedding"): the
//! program opens the store it serves from itself, keeps a handle on it, hands it to Turnstile
//! under a scheme of its own, and runs the server on a thread of its own with the arguments it
//! chooses. When the server stops (SIGTERM or SIGINT), the program goes on with its store.
//!
//! ```text
//! APP_STORE_FILE=/tmp/app.redb cargo run --example embedding -- serve --plugins target/debug --http 127.0.0.1:8080
//! ```
//!
//! Here the store is the embedded one at `APP_STORE_FILE` (a store of the program's choosing:
//! any `StateStore` would do), and the program's own work is to say, once the server has
//! stopped, how many instances it holds. `tests/cli.rs` runs it as a user would.

use std::{process::ExitCode, sync::Arc};

use turnstile::{
    cli::Turnstile,
    store::{EmbeddedStore, StateStore},
};

fn main() -> ExitCode {
    let Some(path) = std::env::var_os("APP_STORE_FILE") else {
        eprintln!("embedding: set APP_STORE_FILE to the store file this program serves from");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime for the program's own work");
    let store: Arc<dyn StateStore> = match runtime.block_on(EmbeddedStore::open(&path)) {
        Ok(store) => Arc::new(store),
        Err(error) => {
            eprintln!("embedding: cannot open {}: {error}", path.to_string_lossy());
            return ExitCode::FAILURE;
        }
    };
    // The arguments after the program's name are the server's, with the store this program
    // chose added: `--store app:` is the store registered below.
    let mut args: Vec<String> = std::env::args().collect();
    args.extend(["--store".into(), "app:".into()]);
    let served = store.clone();
    // Turnstile starts its own runtime: it runs on a thread with none.
    let server = std::thread::spawn(move || {
        Turnstile::new()
            .stores(|stores| {
                stores.register_opened("app", served);
            })
            .run(args)
    });
    let code = server.join().expect("the server's thread");
    match runtime.block_on(store.count("")) {
        Ok(held) => eprintln!("embedding: the server stopped; the store holds {held} instances"),
        Err(error) => eprintln!("embedding: the server stopped; counting failed: {error}"),
    }
    code
}

//! `turnstile-nats`: the `turnstile` binary, with `--store nats://…` opening a [`NatsKvStore`].

use turnstile_nats_kv_store::NatsKvStore;

fn main() -> std::process::ExitCode {
    turnstile::cli::main_with(|stores| {
        stores.register("nats", NatsKvStore::open);
    })
}

//! `turnstile-mariadb`: the `turnstile` binary, every subcommand and flag, with MariaDB/MySQL
//! stores registered, so `--store mysql://…` (or `mariadb://…`) opens a [`MariaDbStore`].

use turnstile_mariadb_store::MariaDbStore;

fn main() -> std::process::ExitCode {
    turnstile::cli::main_with(|stores| {
        stores.register("mysql", MariaDbStore::open);
        stores.register("mariadb", MariaDbStore::open);
    })
}

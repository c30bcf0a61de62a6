//! The link to the server: the URL as given, the connection pool, and what a failure of either
//! means as a [`StoreError`].
//!
//! This module owns turning `mysql://` / `mariadb://` URLs into connection options, the name a
//! store gives itself in logs and errors (the URL without its password), and the one bound every
//! operation runs under. It must not know the tables: the other modules bring their SQL.

use std::{future::Future, time::Duration};

use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts};
use turnstile::store::{StoreError, StoreOptions, error_chain as chain};

/// A pool of connections to one server, and how to report its failures.
pub(crate) struct Link {
    pool: Pool,
    /// `mysql://user@host:port/db`: never the password.
    name: String,
    op_timeout: Duration,
    connect_timeout: Duration,
}

/// Whether a failed request may have changed something, which decides the error it becomes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A read: whatever broke, nothing was applied.
    Read,
    /// A write: a connection that broke or a request that timed out once sent may have been
    /// applied (a statement in autocommit, or a `COMMIT` whose answer was lost).
    Write,
}

impl Link {
    /// The pool for `url`, sized and bounded by `options`. Connects lazily: [`Self::conn`]
    /// is where an unreachable server shows.
    pub(crate) fn new(url: &str, options: &StoreOptions) -> Result<Link, StoreError> {
        // `mysql_async` knows only the `mysql` scheme; `mariadb://` is the same protocol.
        let rest = url
            .strip_prefix("mysql://")
            .or_else(|| url.strip_prefix("mariadb://"))
            .ok_or_else(|| {
                StoreError::Config(format!(
                    "a MariaDB/MySQL store URL starts with mysql:// or mariadb://, not {:?}",
                    redact(url)
                ))
            })?;
        let opts = Opts::from_url(&format!("mysql://{rest}")).map_err(|e| {
            StoreError::Config(format!("{}: not a usable MySQL URL: {e}", redact(url)))
        })?;
        let name = format!(
            "mysql://{}{}:{}/{}",
            opts.user()
                .map(|user| format!("{user}@"))
                .unwrap_or_default(),
            opts.ip_or_hostname(),
            opts.tcp_port(),
            opts.db_name().unwrap_or_default()
        );
        if opts.db_name().is_none_or(str::is_empty) {
            return Err(StoreError::Config(format!(
                "{name}: the URL must name a database (mysql://user@host:3306/DATABASE)"
            )));
        }
        let max = options.pool_size.max(1);
        let constraints = PoolConstraints::new(0, max)
            .ok_or_else(|| StoreError::Config(format!("{name}: pool size {max} is not usable")))?;
        let opts = OptsBuilder::from_opts(opts)
            .pool_opts(PoolOpts::default().with_constraints(constraints))
            // Every lease time is the server's clock read as UTC (`NOW(6)` into `DATETIME(6)`
            // columns), so a daylight-saving change of the server's zone cannot stretch or cut
            // a lease. `setup` runs again after the pool resets a connection; `init` would not.
            .setup(vec!["SET time_zone = '+00:00'"])
            // `UPDATE` reports the rows it matched, not only those whose values changed, so a
            // renewal within the same microsecond still reads as done.
            .client_found_rows(true);
        Ok(Link {
            pool: Pool::new(opts),
            name,
            op_timeout: options.op_timeout,
            connect_timeout: options.connect_timeout,
        })
    }

    /// The URL without its password, for logs and errors.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A connection from the pool, made within the connect timeout.
    pub(crate) async fn conn(&self, what: &str) -> Result<Conn, StoreError> {
        match tokio::time::timeout(self.connect_timeout, self.pool.get_conn()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!(
                "{}: {what}: cannot connect: {}",
                self.name,
                chain(&e)
            ))),
            Err(_) => Err(StoreError::Unavailable(format!(
                "{}: {what}: no connection within {:?}",
                self.name, self.connect_timeout
            ))),
        }
    }

    /// Runs `op` under the operation timeout. Past it, the request may be on its way: a write
    /// may have been applied ([`StoreError::NoAnswer`]).
    pub(crate) async fn bounded<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.op_timeout, op)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::NoAnswer(format!(
                    "{}: {what} got no answer within {:?}",
                    self.name, self.op_timeout
                )))
            })
    }

    /// Runs the read `op` under the operation timeout, its failure reported as a read's.
    pub(crate) async fn read<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, mysql_async::Error>>,
    ) -> Result<T, StoreError> {
        self.bounded(what, async {
            op.await.map_err(|e| self.failed(what, Kind::Read, e))
        })
        .await
    }

    /// What a failed statement means. The server refusing it (an SQL error, a deadlock, a lock
    /// wait that timed out) applied nothing; a connection that broke under a write may have
    /// carried it.
    pub(crate) fn failed(&self, what: &str, kind: Kind, e: mysql_async::Error) -> StoreError {
        let reason = format!("{}: {what}: {}", self.name, chain(&e));
        match (&e, kind) {
            (mysql_async::Error::Server(_), _) | (_, Kind::Read) => StoreError::Unavailable(reason),
            (mysql_async::Error::Io(_), Kind::Write) => StoreError::Dropped(reason),
            (_, Kind::Write) => StoreError::NoAnswer(reason),
        }
    }
}

/// `url` with any password replaced by `***`, for an error about a URL that did not parse.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_url_names_itself_without_its_password() {
        let link = Link::new(
            "mariadb://app:secret@db.example:3307/turnstile",
            &StoreOptions::default(),
        )
        .unwrap();
        assert_eq!(link.name(), "mysql://app@db.example:3307/turnstile");
    }

    #[tokio::test]
    async fn bad_urls_are_configuration_errors() {
        for url in [
            "postgres://app:secret@db/x",
            "mysql://app:secret@db:notaport/x",
            "mysql://app:secret@db:3306",
        ] {
            match Link::new(url, &StoreOptions::default()) {
                Err(StoreError::Config(message)) => {
                    assert!(!message.contains("secret"), "{message}")
                }
                Err(other) => panic!("{url}: expected a configuration error, got {other:?}"),
                Ok(_) => panic!("{url}: expected a configuration error"),
            }
        }
    }
}

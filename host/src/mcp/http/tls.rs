//! TLS for the HTTP endpoint (`--tls-cert`, `--tls-key`), with rustls on the ring provider.
//!
//! The certificate chain and key are PEM files, read at start (a server asked to serve TLS does
//! not start without them) and again on SIGHUP, so a renewed certificate is taken up without a
//! restart; a pair that does not load keeps the one in force and says why. Connections accepted
//! after a reload use the new certificate, open ones keep theirs.
//!
//! The handshake itself runs in `connections.rs`, under the header timeout.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use anyhow::Context;
use rustls::{
    ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
};
use tokio_rustls::TlsAcceptor;

/// The certificate in force and the files it comes from.
#[derive(Clone)]
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    /// Swapped whole on reload; each accept clones the `Arc`.
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl Tls {
    /// Reads the certificate chain and key; an error names the file and the problem.
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Tls> {
        let config = server_config(cert, key)?;
        Ok(Tls {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: Arc::new(RwLock::new(Arc::new(config))),
        })
    }

    /// Reads the files again; on a problem keeps the certificate in force and says why.
    pub fn reload(&self) {
        match server_config(&self.cert, &self.key) {
            Ok(config) => {
                *self
                    .current
                    .write()
                    .unwrap_or_else(|poison| poison.into_inner()) = Arc::new(config);
                tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
            }
            Err(error) => {
                tracing::error!(
                    error = format!("{error:#}"),
                    "TLS certificate not reloaded; the previous one stays in force"
                );
            }
        }
    }

    /// Reloads on every SIGHUP.
    pub fn reload_on_sighup(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = signal(SignalKind::hangup())?;
        let tls = self.clone();
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                tls.reload();
            }
        });
        Ok(())
    }

    /// An acceptor with the certificate in force now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(
            self.current
                .read()
                .unwrap_or_else(|poison| poison.into_inner())
                .clone(),
        )
    }
}

fn server_config(cert: &Path, key: &Path) -> anyhow::Result<ServerConfig> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read the TLS certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{} is not a PEM certificate chain", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!("{} holds no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("cannot read a PEM private key from {}", key.display()))?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .context("rustls has no protocol version for the ring provider")?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .context("the TLS certificate and key do not go together")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_that_does_not_load_is_refused_and_a_bad_reload_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let missing = Tls::load(&cert, &key).err().unwrap();
        assert!(format!("{missing:#}").contains("cert.pem"), "{missing:#}");
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
        let tls = Tls::load(&cert, &key).unwrap();
        let before = tls.current.read().unwrap().clone();
        std::fs::write(&key, "not a key").unwrap();
        tls.reload();
        assert!(Arc::ptr_eq(&before, &tls.current.read().unwrap()));
    }
}

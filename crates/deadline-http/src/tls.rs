//! TLS for [`serve_tls`](crate::serve::serve_tls): a rustls server configuration (the `ring`
//! provider) from PEM files, offering ALPN `h2` and `http/1.1`; and for outbound `https://`
//! calls ([`DeadlineClient::https`](crate::DeadlineClient::https)): a client configuration
//! trusting a given CA ([`client_config_from_pem`]) or the system's roots
//! ([`client_config_with_system_roots`]).
//!
//! # The protocol is the one ALPN negotiated
//!
//! A TLS client says in its handshake which protocols it speaks (ALPN); the server picks one.
//! The configurations made here offer `h2` first, then `http/1.1`, and the server then speaks
//! exactly what was chosen: HTTP/2 if the client offered `h2`, HTTP/1.1 otherwise (a client
//! that offered `http/1.1` only, or no ALPN at all). Nothing is sniffed from the first bytes as
//! on a cleartext port. gRPC clients (grpc-go, tonic) offer `h2` and refuse a server that does
//! not choose it; a client that offers only protocols the server does not speak fails the
//! handshake.
//!
//! # The handshake has its own timeout
//!
//! The budget header is read only once the handshake is over and a request's head has arrived,
//! so the handshake is bounded on its own: [`ServeOptions::tls_handshake_timeout`], the
//! header-read timeout by default. A client that connects and sends nothing, or stops
//! half-way, is closed when it runs out. The handshake runs in the connection's own task, never
//! in the accept loop, and counts against the connection limit from the moment the socket is
//! accepted.
//!
//! # Plaintext sent to the TLS port
//!
//! An HTTP request sent in cleartext to a TLS port is not a TLS record: the handshake fails at
//! once, the failure is logged at debug level (one line, with the peer), and the socket is
//! closed without an answer. The accept loop does not wait for it.
//!
//! # Outbound
//!
//! A client configuration made here verifies the server's certificate chain and name against
//! its roots; the client sets the ALPN protocols it offers itself (`h2` alone for gRPC, `h2`
//! then `http/1.1` otherwise). A certificate that is not trusted fails the handshake, and the
//! attempt fails as a connection error (see [`DeadlineClient::https`](crate::DeadlineClient::https)
//! for when the budget is stamped).
//!
//! [`ServeOptions::tls_handshake_timeout`]: crate::serve::ServeOptions::tls_handshake_timeout

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub use rustls;

/// The ALPN name of HTTP/2.
pub const ALPN_H2: &[u8] = b"h2";

/// The ALPN name of HTTP/1.1.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Why a TLS server configuration could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// The certificate file could not be read or holds a malformed PEM section.
    ReadCert {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: rustls_pki_types::pem::Error,
    },
    /// The certificate file holds no `CERTIFICATE` section.
    NoCert {
        /// The file.
        path: PathBuf,
    },
    /// The key file could not be read, is malformed, or holds no private key.
    ReadKey {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: rustls_pki_types::pem::Error,
    },
    /// rustls refused the certificate and key (for instance, a key that does not match the
    /// certificate, or of a kind the `ring` provider does not support).
    Rejected(rustls::Error),
    /// The CA file could not be read or holds a malformed PEM section.
    ReadCa {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: rustls_pki_types::pem::Error,
    },
    /// The CA file holds no `CERTIFICATE` section.
    NoCa {
        /// The file.
        path: PathBuf,
    },
    /// A certificate of the CA file is not a usable trust anchor.
    BadCa {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: rustls::Error,
    },
    /// No root certificate could be loaded from the system's store.
    NoSystemRoots {
        /// What the loader reported, if anything.
        detail: String,
    },
}

impl fmt::Display for TlsConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsConfigError::ReadCert { path, source } => {
                write!(
                    f,
                    "cannot read certificates from {}: {source}",
                    path.display()
                )
            }
            TlsConfigError::NoCert { path } => {
                write!(f, "no PEM CERTIFICATE section in {}", path.display())
            }
            TlsConfigError::ReadKey { path, source } => {
                write!(
                    f,
                    "cannot read a private key from {}: {source}",
                    path.display()
                )
            }
            TlsConfigError::Rejected(error) => {
                write!(f, "the certificate and key were refused: {error}")
            }
            TlsConfigError::ReadCa { path, source } => {
                write!(
                    f,
                    "cannot read CA certificates from {}: {source}",
                    path.display()
                )
            }
            TlsConfigError::NoCa { path } => {
                write!(
                    f,
                    "no PEM CERTIFICATE section in CA file {}",
                    path.display()
                )
            }
            TlsConfigError::BadCa { path, source } => {
                write!(
                    f,
                    "a certificate in CA file {} is not a usable root: {source}",
                    path.display()
                )
            }
            TlsConfigError::NoSystemRoots { detail } if detail.is_empty() => {
                write!(f, "no root certificate found in the system's store")
            }
            TlsConfigError::NoSystemRoots { detail } => {
                write!(
                    f,
                    "no root certificate found in the system's store: {detail}"
                )
            }
        }
    }
}

// The message already holds the cause's own, so `source` is left empty: a report printing the
// chain would say it twice.
impl std::error::Error for TlsConfigError {}

/// A server configuration from a PEM certificate chain (the server's certificate first, then
/// any intermediates) and a PEM private key (PKCS #8, PKCS #1 or SEC1), offering ALPN `h2` then
/// `http/1.1`. Every error is a value: a missing file, a file with no certificate or no key,
/// and a key that does not match the certificate.
pub fn server_config_from_pem(
    cert: impl AsRef<Path>,
    key: impl AsRef<Path>,
) -> Result<Arc<ServerConfig>, TlsConfigError> {
    let (cert, key) = (cert.as_ref(), key.as_ref());
    let read_cert = |source| TlsConfigError::ReadCert {
        path: cert.to_owned(),
        source,
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(read_cert)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_cert)?;
    if chain.is_empty() {
        return Err(TlsConfigError::NoCert {
            path: cert.to_owned(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsConfigError::ReadKey {
        path: key.to_owned(),
        source,
    })?;
    server_config(chain, key)
}

/// A server configuration from a certificate chain and its private key, with the `ring`
/// provider and rustls's safe default protocol versions, offering ALPN `h2` then `http/1.1`.
/// The key must match the first certificate.
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, TlsConfigError> {
    // The provider is named here rather than taken from the process default, so a build that
    // also links another provider cannot make this panic or change it.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsConfigError::Rejected)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(TlsConfigError::Rejected)?;
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration trusting the CA certificates of a PEM file (one or more
/// `CERTIFICATE` sections), with the `ring` provider and no ALPN (the client sets the protocols
/// it offers). Every error is a value: a missing or unreadable file, a file with no certificate,
/// a certificate that is not a usable root.
pub fn client_config_from_pem(ca: impl AsRef<Path>) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let path = ca.as_ref();
    let read = |source| TlsConfigError::ReadCa {
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if certs.is_empty() {
        return Err(TlsConfigError::NoCa {
            path: path.to_owned(),
        });
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|source| TlsConfigError::BadCa {
            path: path.to_owned(),
            source,
        })?;
    }
    client_config(roots)
}

/// A client configuration trusting the system's root certificates (the platform's certificate
/// store; on Linux the `SSL_CERT_FILE` / `SSL_CERT_DIR` variables override where it is read). Certificates the store holds that are not usable roots are skipped; none
/// at all is [`TlsConfigError::NoSystemRoots`].
pub fn client_config_with_system_roots() -> Result<Arc<ClientConfig>, TlsConfigError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let detail = found
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return Err(TlsConfigError::NoSystemRoots { detail });
    }
    client_config(roots)
}

/// A client configuration verifying servers against `roots`, with the `ring` provider and
/// rustls's safe default protocol versions, and no ALPN.
pub fn client_config(roots: RootCertStore) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsConfigError::Rejected)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

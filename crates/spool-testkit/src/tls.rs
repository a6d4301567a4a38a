//! Certificates made in the test: a CA of the test's own, a server certificate for 127.0.0.1
//! signed by it, a client certificate for mutual TLS, and the rustls server configuration a
//! TLS [`crate::Receiver`] serves with. Nothing here is trusted by the system.

use std::sync::Arc;

use anyhow::Context as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate and its private key, in PEM.
#[derive(Debug, Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// A certificate authority made for one test.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    pub fn new(name: &str) -> anyhow::Result<TestCa> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(TestCa { cert, key })
    }

    /// The CA's certificate (what a client adds to its trust roots).
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses), signed by this CA.
    pub fn issue(&self, names: &[&str]) -> anyhow::Result<Pem> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone())?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// A rustls server configuration presenting `server`; with `client_ca`, clients must present a
/// certificate that CA signed (mutual TLS).
pub fn server_config(
    server: &Pem,
    client_ca: Option<&str>,
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(server.cert.as_bytes())
            .collect::<Result<_, _>>()
            .context("server certificate PEM")?;
    let key = PrivateKeyDer::from_pem_slice(server.key.as_bytes()).context("server key PEM")?;
    let builder = rustls::ServerConfig::builder();
    let config = match client_ca {
        None => builder.with_no_client_auth().with_single_cert(certs, key)?,
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(cert.context("client CA PEM")?)?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).build()?;
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(certs, key)?
        }
    };
    Ok(Arc::new(config))
}

//! Connections to the mail servers: every TCP connection through `adf_egress::connect_tcp`
//! (the agent's policy admits the address first), then TLS (rustls + ring over the system
//! roots) when the endpoint's security asks for it; IMAP through `async-imap` and SMTP through
//! lettre's connection API, both on the stream opened here.

use std::fmt;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use adf_egress::{EgressErrorKind, SystemLookup};
use lettre::transport::smtp::client::{
    AsyncSmtpConnection, AsyncTokioStream, Certificate, CertificateStore, TlsParameters,
};
use lettre::transport::smtp::extension::ClientId;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::KIND;
use crate::error::AdapterError;

/// How long opening one connection (TCP, then TLS) may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How a connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Security {
    /// TLS from the first byte (IMAPS 993, SMTPS 465).
    Tls,
    /// Plain, then upgraded with STARTTLS before anything else is sent.
    StartTls,
    /// Plain text: accepted for loopback hosts only (a local relay, tests).
    None,
}

impl Security {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "tls" => Some(Self::Tls),
            "starttls" => Some(Self::StartTls),
            "none" => Some(Self::None),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Tls => "tls",
            Self::StartTls => "starttls",
            Self::None => "none",
        }
    }
}

/// One server to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) security: Security,
}

/// Whether `host` names this machine (where plain text never leaves it).
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn transport(what: &str, e: impl fmt::Display) -> AdapterError {
    AdapterError::Transport {
        adapter: KIND.into(),
        reason: format!("{what}: {e}"),
    }
}

/// A TCP connection to `endpoint`, admitted by `policy`.
async fn tcp(
    policy: &adf_egress::Policy,
    endpoint: &Endpoint,
) -> Result<(TcpStream, SocketAddr), AdapterError> {
    adf_egress::connect_tcp(
        policy,
        &endpoint.host,
        endpoint.port,
        &SystemLookup,
        CONNECT_TIMEOUT,
    )
    .await
    .map_err(|e| match e.kind {
        EgressErrorKind::Failed => transport(&format!("{}:{}", endpoint.host, endpoint.port), e),
        _ => AdapterError::Egress {
            adapter: KIND.into(),
            reason: e.to_string(),
        },
    })
}

/// Which certificates TLS connections to the mail servers trust. Verification is never off.
#[derive(Debug, Clone, Default)]
pub enum MailTrust {
    /// The system's root certificates (what the daemon's adapters use).
    #[default]
    System,
    /// Exactly these root certificates (DER): for a host whose mail servers use a private CA
    /// it was given explicitly, and for tests against a local server with a test CA. Never
    /// read from an agent's config.
    Certificates(Vec<Vec<u8>>),
}

/// The TLS client configuration over `trust`'s roots.
fn tls_config(trust: &MailTrust) -> Result<Arc<rustls::ClientConfig>, AdapterError> {
    adf_egress::client::ensure_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    let certs: Vec<rustls::pki_types::CertificateDer<'static>> = match trust {
        MailTrust::System => rustls_native_certs::load_native_certs().certs,
        MailTrust::Certificates(ders) => ders
            .iter()
            .map(|der| rustls::pki_types::CertificateDer::from(der.clone()))
            .collect(),
    };
    for cert in certs {
        // One unreadable certificate is no reason to refuse the others.
        let _skipped = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(transport(
            "TLS",
            "no system root certificates were found to verify the mail server",
        ));
    }
    Ok(Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

async fn tls_wrap<S>(
    stream: S,
    host: &str,
    trust: &MailTrust,
) -> Result<tokio_rustls::client::TlsStream<S>, AdapterError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| transport("TLS server name", e))?;
    let connector = tokio_rustls::TlsConnector::from(tls_config(trust)?);
    tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, stream))
        .await
        .map_err(|_| transport("TLS handshake", "timed out"))?
        .map_err(|e| transport(&format!("TLS handshake with {host}"), e))
}

/// A byte stream to a mail server, plain or TLS.
pub(crate) trait MailIo: AsyncRead + AsyncWrite + Unpin + Send + Sync + fmt::Debug {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync + fmt::Debug> MailIo for T {}

/// The stream an IMAP session runs on.
pub(crate) type ImapStream = Box<dyn MailIo>;
/// An IMAP session.
pub(crate) type ImapSession = async_imap::Session<ImapStream>;

/// The IMAP error as a transport failure (a restart may help).
pub(crate) fn imap_error(what: &str, e: async_imap::error::Error) -> AdapterError {
    transport(&format!("IMAP {what}"), e)
}

/// Connects to the IMAP server and logs in. `Err(Ok(reason))` is a refused login (the
/// server's words); `Err(Err(_))` any other failure.
pub(crate) async fn imap_login(
    policy: &adf_egress::Policy,
    endpoint: &Endpoint,
    username: &str,
    password: &str,
    trust: &MailTrust,
) -> Result<ImapSession, Result<String, AdapterError>> {
    let (stream, _) = tcp(policy, endpoint).await.map_err(Err)?;
    let stream: ImapStream = match endpoint.security {
        Security::Tls => Box::new(tls_wrap(stream, &endpoint.host, trust).await.map_err(Err)?),
        Security::None => Box::new(stream),
        Security::StartTls => {
            let mut client = async_imap::Client::new(stream);
            greeting(&mut client).await.map_err(Err)?;
            client
                .run_command_and_check_ok("STARTTLS", None)
                .await
                .map_err(|e| Err(imap_error("STARTTLS", e)))?;
            let plain = client.into_inner();
            Box::new(tls_wrap(plain, &endpoint.host, trust).await.map_err(Err)?)
        }
    };
    let mut client = async_imap::Client::new(stream);
    if endpoint.security != Security::StartTls {
        greeting(&mut client).await.map_err(Err)?;
    }
    let login = tokio::time::timeout(CONNECT_TIMEOUT, client.login(username, password))
        .await
        .map_err(|_| Err(transport("IMAP LOGIN", "timed out")))?;
    login.map_err(|(e, _client)| match e {
        async_imap::error::Error::No(reason) | async_imap::error::Error::Bad(reason) => {
            Ok(format!("IMAP LOGIN refused: {reason}"))
        }
        other => Err(imap_error("LOGIN", other)),
    })
}

async fn greeting<S>(client: &mut async_imap::Client<S>) -> Result<(), AdapterError>
where
    S: AsyncRead + AsyncWrite + Unpin + fmt::Debug + Send,
{
    match tokio::time::timeout(CONNECT_TIMEOUT, client.read_response()).await {
        Err(_) => Err(transport("IMAP greeting", "timed out")),
        Ok(Err(e)) => Err(transport("IMAP greeting", e)),
        Ok(Ok(None)) => Err(transport(
            "IMAP greeting",
            "the server closed the connection",
        )),
        Ok(Ok(Some(_))) => Ok(()),
    }
}

/// A TLS stream lettre can carry (it asks streams for their peer's address).
#[derive(Debug)]
struct SmtpTls {
    stream: tokio_rustls::client::TlsStream<TcpStream>,
    peer: SocketAddr,
}

impl AsyncRead for SmtpTls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for SmtpTls {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl AsyncTokioStream for SmtpTls {
    fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.peer)
    }
}

/// The SMTP error's words (the server's reply when there is one).
pub(crate) fn smtp_reason(e: &lettre::transport::smtp::Error) -> String {
    e.to_string()
}

/// The SMTP status code of a server's refusal, when the error carries one.
pub(crate) fn smtp_code(e: &lettre::transport::smtp::Error) -> Option<u16> {
    e.status()
        .and_then(|code| code.to_string().parse::<u16>().ok())
}

/// Connects to the SMTP server (EHLO, STARTTLS when asked).
pub(crate) async fn smtp_connect(
    policy: &adf_egress::Policy,
    endpoint: &Endpoint,
    hello: &ClientId,
    trust: &MailTrust,
) -> Result<AsyncSmtpConnection, AdapterError> {
    let (stream, peer) = tcp(policy, endpoint).await?;
    let smtp = |e: lettre::transport::smtp::Error| transport("SMTP", smtp_reason(&e));
    let opened = async {
        match endpoint.security {
            Security::Tls => {
                let stream = tls_wrap(stream, &endpoint.host, trust).await?;
                AsyncSmtpConnection::connect_with_transport(
                    Box::new(SmtpTls { stream, peer }),
                    hello,
                )
                .await
                .map_err(smtp)
            }
            Security::None => AsyncSmtpConnection::connect_with_transport(Box::new(stream), hello)
                .await
                .map_err(smtp),
            Security::StartTls => {
                adf_egress::client::ensure_crypto_provider();
                let mut connection =
                    AsyncSmtpConnection::connect_with_transport(Box::new(stream), hello)
                        .await
                        .map_err(smtp)?;
                let mut builder = TlsParameters::builder(endpoint.host.clone());
                if let MailTrust::Certificates(ders) = trust {
                    builder = builder.certificate_store(CertificateStore::None);
                    for der in ders {
                        builder = builder.add_root_certificate(
                            Certificate::from_der(der.clone()).map_err(smtp)?,
                        );
                    }
                }
                let parameters = builder.build().map_err(smtp)?;
                connection.starttls(parameters, hello).await.map_err(smtp)?;
                Ok(connection)
            }
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, opened)
        .await
        .map_err(|_| transport("SMTP", "connecting timed out"))?
}

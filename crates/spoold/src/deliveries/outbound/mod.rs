//! Outbound HTTP. **API boundary:** this is the only module that builds an HTTP client.
//!
//! Every connection goes through [`policy`]: host names are resolved by our resolver, which
//! refuses the attempt if *any* resolved address is denied and hands reqwest only the vetted
//! addresses (no second lookup, so DNS rebinding cannot slip in); IP-literal hosts, which
//! bypass resolvers, are checked explicitly. Environment proxies are ignored and the client
//! follows no redirect: [`Outbound::send`] follows them hop by hop, judging each, and sends no
//! hop twice in one attempt (a loop ends the attempt as `redirect_loop`).
//!
//! A request that must not be sent twice (at most once) goes out on a connection of its own
//! ([`Request::fresh_connection`]), never on a kept-alive one: a server closing an idle
//! connection (its keep-alive timeout) just as the request is written would leave it unknown
//! whether the request was read, although it never was.

mod errors;
mod gate;
pub mod policy;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use url::{Host, Url};

pub use gate::RELEASED as BODY_RELEASED;
pub use policy::{AddressPolicy, Cidr, Denied};

/// How much of a response body is kept (for `lastError`).
pub const MAX_RESPONSE_EXCERPT: usize = 4096;

/// The `User-Agent` sent (to targets and in reconcile checks) unless a delivery sets its own.
pub const USER_AGENT: &str = concat!("spoold/", env!("CARGO_PKG_VERSION"));

/// How long past its deadline a request may still take to hand over an answer that is already
/// on its way (read by the connection's own task): a host paused past the deadline while the
/// answer arrived reads it instead of calling the outcome unknown.
const ANSWER_GRACE: Duration = Duration::from_millis(50);

/// A configured outbound client. Cheap to clone.
#[derive(Clone)]
pub struct Outbound {
    client: reqwest::Client,
    /// The same, but every request on a connection of its own ([`Request::fresh_connection`]).
    fresh: reqwest::Client,
    policy: Arc<AddressPolicy>,
    max_redirects: u32,
    config: OutboundConfig,
    /// Clients for targets with TLS settings of their own, by [`TlsSettings::key`] and whether
    /// they keep connections: built at the first request that needs one, kept while the
    /// settings are unchanged.
    tls_clients: Arc<std::sync::Mutex<std::collections::HashMap<(String, bool), reqwest::Client>>>,
}

/// TLS settings of the targets a `[[targets]]` rule matches: extra trust roots (a private CA),
/// a client certificate (mutual TLS), a lowest TLS version. Checked when the configuration
/// is read. Its `Debug` shows no key material.
#[derive(Clone)]
pub struct TlsSettings {
    /// A digest of everything below: equal settings share one client.
    key: String,
    roots: Vec<reqwest::Certificate>,
    identity: Option<reqwest::Identity>,
    min: Option<reqwest::tls::Version>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("roots", &self.roots.len())
            .field("client_certificate", &self.identity.is_some())
            .field("min", &self.min)
            .finish()
    }
}

impl TlsSettings {
    /// From PEM: `ca`, certificates to trust besides the system's; `client`, a certificate
    /// chain and its private key; `min`, `"1.2"` or `"1.3"`. An error says which part is wrong.
    pub fn from_pem(
        ca: Option<&[u8]>,
        client: Option<(&[u8], &[u8])>,
        min: Option<&str>,
    ) -> Result<TlsSettings, String> {
        use sha2::{Digest, Sha256};
        let mut digest = Sha256::new();
        let roots = match ca {
            Some(pem) => {
                digest.update(b"ca");
                digest.update(pem);
                let roots = reqwest::Certificate::from_pem_bundle(pem)
                    .map_err(|e| format!("ca_file: not PEM certificates: {e}"))?;
                if roots.is_empty() {
                    return Err("ca_file: no certificate in it".into());
                }
                roots
            }
            None => Vec::new(),
        };
        let identity = match client {
            Some((cert, key)) => {
                digest.update(b"client");
                digest.update(cert);
                digest.update(key);
                let mut pem = cert.to_vec();
                pem.push(b'\n');
                pem.extend_from_slice(key);
                Some(reqwest::Identity::from_pem(&pem).map_err(|e| {
                    format!("client_cert and client_key: not a PEM certificate and key: {e}")
                })?)
            }
            None => None,
        };
        let min = match min {
            None => None,
            Some("1.2") => Some(reqwest::tls::Version::TLS_1_2),
            Some("1.3") => Some(reqwest::tls::Version::TLS_1_3),
            Some(other) => return Err(format!("min_tls {other:?}: \"1.2\" or \"1.3\"")),
        };
        digest.update(format!("{min:?}").as_bytes());
        let key = digest
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let settings = TlsSettings {
            key,
            roots,
            identity,
            min,
        };
        // Whatever the TLS library refuses is found now, not at the first request.
        client_builder(&OutboundConfig::probe(), Some(&settings), false)
            .build()
            .map_err(|e| format!("TLS settings: {e}"))?;
        Ok(settings)
    }
}

/// The client builder every outbound client starts from, with `tls` applied if given; with
/// `fresh`, one that keeps no connection for a next request.
fn client_builder(
    config: &OutboundConfig,
    tls: Option<&TlsSettings>,
    fresh: bool,
) -> reqwest::ClientBuilder {
    let idle_per_host = if fresh { 0 } else { config.per_target as usize };
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        // Redirects are followed by `send`, hop by hop, so the policy sees every one.
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(PolicyResolver {
            policy: Arc::new(config.policy.clone()),
        }))
        .connect_timeout(config.connect_timeout)
        .pool_max_idle_per_host(idle_per_host)
        .pool_idle_timeout(Duration::from_secs(60))
        .tcp_keepalive(Duration::from_secs(30));
    if let Some(tls) = tls {
        for root in &tls.roots {
            builder = builder.add_root_certificate(root.clone());
        }
        if let Some(identity) = &tls.identity {
            builder = builder.identity(identity.clone());
        }
        if let Some(min) = tls.min {
            builder = builder.min_tls_version(min);
        }
    }
    builder
}

/// How the outbound client behaves.
#[derive(Debug, Clone)]
pub struct OutboundConfig {
    pub policy: AddressPolicy,
    /// Idle keep-alive connections kept per target.
    pub per_target: u32,
    pub connect_timeout: Duration,
    /// Redirects followed per attempt; 0 = none (a 3xx is the attempt's answer).
    pub max_redirects: u32,
}

impl OutboundConfig {
    /// A configuration to try TLS settings with (nothing is sent with it).
    fn probe() -> OutboundConfig {
        OutboundConfig {
            policy: AddressPolicy::default(),
            per_target: 1,
            connect_timeout: Duration::from_secs(1),
            max_redirects: 0,
        }
    }
}

/// One request to send.
pub struct Request<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// For the whole attempt, redirects included.
    pub timeout: Duration,
    /// What set `timeout`, for the message when it runs out (`request timeout`).
    pub timeout_reason: &'static str,
    /// How much of the response body to keep (at least [`MAX_RESPONSE_EXCERPT`] is sensible).
    pub keep_body: usize,
    /// No hop is begun after this instant (monotonic, so a paused host sees the time it was
    /// stopped): for a delivery, its claim's lease less the request timeout and the margin to
    /// record the result — past it another host may own the delivery. It is checked before
    /// each hop, and again by the body when the connection asks for it, right before the
    /// request is flushed (see `gate`); a host paused between that look at the clock and the
    /// write is the window left (requests without a body: from the check before the hop).
    pub write_by: Instant,
    /// Redirects followed, instead of the client's `--max-redirects` (reconciliation: 0).
    pub max_redirects: Option<u32>,
    /// The target's own TLS settings (its `[[targets]]` rule's), for every hop.
    pub tls: Option<Arc<TlsSettings>>,
    /// Send every hop on a new connection (and ask the server to close it after answering)
    /// instead of one kept alive from an earlier request: a kept-alive connection the server
    /// closes (its idle timeout) as the request is written fails the request without it being
    /// read, and the client cannot tell that from a request read and then cut off. At most
    /// once that is an `unknown` outcome of a request that never arrived. A new connection
    /// costs a TCP (and TLS) handshake per request; at least once, where such a request is
    /// simply sent again, connections are reused.
    pub fresh_connection: bool,
}

/// A response: the status and the start of its body (at most the request's `keep_body` bytes).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub excerpt: Vec<u8>,
    /// The body was longer than `excerpt`.
    pub truncated: bool,
    /// Redirects followed to get here.
    pub redirects: u32,
    /// With redirects, the status of the first answer (the request reached the target there).
    pub first_status: Option<u16>,
}

/// Why no response was obtained, with a stable code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendError {
    pub code: SendErrorCode,
    pub message: String,
    /// Whether the request can have reached the target's application. `false` only when that
    /// is certain: nothing was written to a connection (no address, refused, blocked, TLS
    /// handshake failed) or the target answered. A timeout or a connection lost after the
    /// request was handed to a connection is `true`: bytes may have left.
    pub may_have_arrived: bool,
    /// A hop before the failure answered (the redirect followed): the request certainly reached
    /// the target — with the status of its first answer. `None`: nothing answered.
    pub answered: Option<u16>,
}

/// Stable transport error codes (they appear as `lastErrorCode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendErrorCode {
    TargetBlocked,
    DnsFailed,
    ConnectFailed,
    TlsFailed,
    Timeout,
    InvalidRequest,
    /// A redirect pointed somewhere we will not go (not http/https, unparsable).
    RedirectRefused,
    /// A redirect pointed to a method and URL already sent in this attempt.
    RedirectLoop,
    RequestFailed,
    /// Not sent: the claim's lease was too near its end to begin (the host was paused, or a
    /// write stalled).
    LeaseSpent,
}

impl SendErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            SendErrorCode::TargetBlocked => "target_blocked",
            SendErrorCode::DnsFailed => "dns_failed",
            SendErrorCode::ConnectFailed => "connect_failed",
            SendErrorCode::TlsFailed => "tls_failed",
            SendErrorCode::Timeout => "timeout",
            SendErrorCode::InvalidRequest => "invalid_request",
            SendErrorCode::RedirectRefused => "redirect_refused",
            SendErrorCode::RedirectLoop => "redirect_loop",
            SendErrorCode::RequestFailed => "request_failed",
            SendErrorCode::LeaseSpent => "lease_expired",
        }
    }

    /// Whether asking again could give a different answer.
    pub fn is_retryable(self) -> bool {
        !matches!(
            self,
            SendErrorCode::TargetBlocked
                | SendErrorCode::InvalidRequest
                | SendErrorCode::RedirectRefused
                | SendErrorCode::RedirectLoop
        )
    }
}

/// The client could not be built (TLS roots, resolver).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the outbound HTTP client: {0}")]
pub struct BuildError(#[from] reqwest::Error);

impl Outbound {
    pub fn new(config: OutboundConfig) -> Result<Outbound, BuildError> {
        let policy = Arc::new(config.policy.clone());
        let client = client_builder(&config, None, false).build()?;
        let fresh = client_builder(&config, None, true).build()?;
        Ok(Outbound {
            client,
            fresh,
            policy,
            max_redirects: config.max_redirects,
            config,
            tls_clients: Arc::default(),
        })
    }

    /// The client for a request with `tls` settings (the shared one without), keeping
    /// connections unless `fresh`.
    fn client_for(
        &self,
        tls: Option<&TlsSettings>,
        fresh: bool,
    ) -> Result<reqwest::Client, SendError> {
        let Some(tls) = tls else {
            return Ok(if fresh { &self.fresh } else { &self.client }.clone());
        };
        let mut clients = self.tls_clients.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tls.key.clone(), fresh);
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = client_builder(&self.config, Some(tls), fresh)
            .build()
            .map_err(|e| SendError {
                code: SendErrorCode::TlsFailed,
                message: format!("cannot build a client with the target's TLS settings: {e}"),
                may_have_arrived: false,
                answered: None,
            })?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// The policy verdict on a URL whose host is an IP literal; `Ok` for host names (they are
    /// judged when resolved).
    pub fn check_literal(&self, url: &Url) -> Result<(), Denied> {
        literal_ip(url).map_or(Ok(()), |ip| self.policy.check(ip))
    }

    /// Send one request, following up to `max_redirects` redirects (each hop judged by the
    /// address policy again, none sent twice), and read at most [`MAX_RESPONSE_EXCERPT`] bytes
    /// of the final response body.
    pub async fn send(&self, req: Request<'_>) -> Result<Response, SendError> {
        let invalid = |message: String| SendError {
            code: SendErrorCode::InvalidRequest,
            message,
            may_have_arrived: false,
            answered: None,
        };
        let mut url = Url::parse(req.url).map_err(|e| invalid(format!("parse target URL: {e}")))?;
        let mut method = reqwest::Method::from_bytes(req.method.as_bytes())
            .map_err(|e| invalid(format!("method: {e}")))?;
        let client = self.client_for(req.tls.as_deref(), req.fresh_connection)?;
        let mut headers = req.headers;
        if req.fresh_connection {
            // The server closes it after answering: neither side keeps it, and the server, not
            // this host, holds the closed socket's TIME_WAIT.
            headers.insert(
                reqwest::header::CONNECTION,
                HeaderValue::from_static("close"),
            );
        }
        let mut body = req.body;
        let max_redirects = req.max_redirects.unwrap_or(self.max_redirects);
        let write_by = req.write_by;
        // The status of the first hop that answered with a redirect we followed: from then on
        // the request has certainly reached the target, whatever becomes of the next hops.
        let first_answer = AtomicU16::new(0);
        let work = async {
            let mut redirects = 0;
            // The hops sent in this attempt: a redirect back to one of them is a loop.
            let mut sent: Vec<(reqwest::Method, Url)> = Vec::new();
            loop {
                self.check_literal(&url)
                    .map_err(|denied| errors::blocked(None, &denied))?;
                if Instant::now() > write_by {
                    return Err(not_written(
                        "the claim's lease was too near its end to begin the request",
                    ));
                }
                sent.push((method.clone(), url.clone()));
                let resp = client
                    .request(method.clone(), url.clone())
                    .headers(hop_headers(&headers, &method, &body))
                    .body(gate::body(
                        body.clone(),
                        write_by,
                        headers.get(spool_proto::DELIVERY_ID_HEADER),
                    ))
                    .send()
                    .await
                    .map_err(|e| {
                        if gate::closed(&e) {
                            not_written(
                                "the connection was ready only after the claim's lease \
                                 allowed the request to be written",
                            )
                        } else {
                            errors::describe(&e, &url)
                        }
                    })?;
                let status = resp.status().as_u16();
                if redirects < max_redirects && is_followed_redirect(status) {
                    if let Some(location) = resp.headers().get(reqwest::header::LOCATION) {
                        let _ = first_answer.compare_exchange(
                            0,
                            status,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                        let next = next_hop(&url, location)?;
                        if !same_origin(&url, &next) {
                            // Credentials are for the origin they were given for.
                            drop_secret_headers(&mut headers);
                        }
                        let keeps_method = matches!(status, 307 | 308);
                        // 301/302/303: the next request is a GET without the body.
                        let next_method = if keeps_method || method == reqwest::Method::HEAD {
                            method.clone()
                        } else {
                            reqwest::Method::GET
                        };
                        if sent
                            .iter()
                            .any(|(m, u)| *m == next_method && same_request(u, &next))
                        {
                            return Err(SendError {
                                code: SendErrorCode::RedirectLoop,
                                message: format!(
                                    "redirect loop: HTTP {status} to {next_method} {next}, which \
                                     this attempt already sent; not sent again"
                                ),
                                may_have_arrived: true,
                                answered: None,
                            });
                        }
                        if !keeps_method {
                            method = next_method;
                            body = Bytes::new();
                            headers.remove(reqwest::header::CONTENT_TYPE);
                        }
                        url = next;
                        redirects += 1;
                        continue;
                    }
                }
                let first = first_answer.load(Ordering::Relaxed);
                return read_excerpt(resp, &url, redirects, req.keep_body)
                    .await
                    .map(|r| Response {
                        first_status: (first != 0).then_some(first),
                        ..r
                    });
            }
        };
        tokio::pin!(work);
        let result = match tokio::time::timeout(req.timeout, &mut work).await {
            Ok(result) => result,
            // An answer already waiting when the deadline passes (the host was paused while it
            // arrived) is still the answer: the connection's task gets a moment to hand it over.
            Err(_) => match tokio::time::timeout(ANSWER_GRACE, &mut work).await {
                Ok(result) => result,
                Err(_) => Err(errors::timed_out(req.timeout, req.timeout_reason)),
            },
        };
        result.map_err(|e| match first_answer.load(Ordering::Relaxed) {
            0 => e,
            first => SendError {
                message: format!(
                    "{} (after the target answered HTTP {first}: the request reached it)",
                    e.message
                ),
                may_have_arrived: true,
                answered: Some(first),
                ..e
            },
        })
    }
}

/// Nothing was written: past [`Request::write_by`].
fn not_written(why: &str) -> SendError {
    SendError {
        code: SendErrorCode::LeaseSpent,
        message: format!("not sent: {why} (was the host paused?)"),
        may_have_arrived: false,
        answered: None,
    }
}

fn is_followed_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

/// Resolve a `Location` against the current URL; only http and https may follow.
fn next_hop(current: &Url, location: &HeaderValue) -> Result<Url, SendError> {
    // The target answered (with a redirect we will not follow): a definite answer.
    let refused = |message: String| SendError {
        code: SendErrorCode::RedirectRefused,
        message,
        may_have_arrived: false,
        answered: None,
    };
    let text = location
        .to_str()
        .map_err(|_| refused("redirect Location is not valid text".into()))?;
    let next = current
        .join(text)
        .map_err(|e| refused(format!("redirect to {text:?}: {e}")))?;
    if !matches!(next.scheme(), "http" | "https") || next.host_str().is_none() {
        return Err(refused(format!(
            "redirect to {next} refused: only http and https"
        )));
    }
    if !next.username().is_empty() || next.password().is_some() {
        return Err(refused(
            "redirect to a URL with user information refused".into(),
        ));
    }
    Ok(next)
}

/// Remove every header whose value the masking rule treats as a secret.
fn drop_secret_headers(headers: &mut HeaderMap) {
    let secret: Vec<HeaderName> = headers
        .keys()
        .filter(|name| spool_proto::headers::is_secret_header(name.as_str()))
        .cloned()
        .collect();
    for name in secret {
        headers.remove(name);
    }
}

/// Whether two hops are the same request target: the same URL but for a fragment (which is
/// not sent).
fn same_request(a: &Url, b: &Url) -> bool {
    let mut a = a.clone();
    let mut b = b.clone();
    a.set_fragment(None);
    b.set_fragment(None);
    a == b
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

async fn read_excerpt(
    mut resp: reqwest::Response,
    url: &Url,
    redirects: u32,
    keep: usize,
) -> Result<Response, SendError> {
    let status = resp.status().as_u16();
    let headers = std::mem::take(resp.headers_mut());
    let mut excerpt = Vec::new();
    let mut truncated = false;
    while !truncated {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = keep - excerpt.len();
                truncated = chunk.len() > room;
                excerpt.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) => break,
            // A body that breaks off after a 2xx status is not a success.
            Err(e) if (200..300).contains(&status) => return Err(errors::describe(&e, url)),
            Err(_) => break,
        }
    }
    Ok(Response {
        status,
        headers,
        excerpt,
        truncated,
        redirects,
        first_status: None,
    })
}

/// The headers of one hop: `headers`, and `Content-Length: 0` on a POST, PUT or PATCH without
/// a body. RFC 9110 §8.6: a user agent sends it for a method that gives content a meaning,
/// even when it is 0 (spoold v0.1.0 did, and some servers answer 411 without it); hyper writes
/// none for an empty body.
fn hop_headers(headers: &HeaderMap, method: &reqwest::Method, body: &Bytes) -> HeaderMap {
    let mut headers = headers.clone();
    if body.is_empty()
        && matches!(
            *method,
            reqwest::Method::POST | reqwest::Method::PUT | reqwest::Method::PATCH
        )
    {
        headers.insert(
            reqwest::header::CONTENT_LENGTH,
            HeaderValue::from_static("0"),
        );
    }
    headers
}

/// Build a header map from stored pairs; names and values were validated at submission.
pub fn header_map(pairs: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(pairs.len() + 4);
    for (name, value) in pairs {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            map.insert(n, v);
        }
    }
    map
}

/// The host of `url` if it is an IP literal, in the form the URL parser normalised it to
/// (`http://2130706433/` and `http://0x7f.1/` are both 127.0.0.1 by then).
pub fn literal_ip(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        Host::Domain(_) => None,
    }
}

/// Resolves host names and applies the address policy to every address.
struct PolicyResolver {
    policy: Arc<AddressPolicy>,
}

/// Every address of the host, or the first one the policy refuses.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveError {
    #[error("resolve {host}: {source}")]
    Dns {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("resolve {host}: no addresses")]
    NoAddresses { host: String },
    #[error("target {host} resolves to a blocked address: {denied}")]
    Blocked { host: String, denied: Denied },
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|source| ResolveError::Dns {
                    host: host.clone(),
                    source,
                })?
                .collect();
            if addrs.is_empty() {
                return Err(ResolveError::NoAddresses { host }.into());
            }
            // Refuse if any address is denied: picking an allowed one would let a name that
            // mixes public and internal addresses through.
            for addr in &addrs {
                policy
                    .check(addr.ip())
                    .map_err(|denied| ResolveError::Blocked {
                        host: host.clone(),
                        denied,
                    })?;
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

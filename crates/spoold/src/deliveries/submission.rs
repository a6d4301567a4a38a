//! Turning a create request into a [`NewDelivery`]: JSON decoding (`invalid_request`), the
//! field rules (`invalid_delivery`), normalisation, and the idempotency fingerprint.
//!
//! Parse, don't validate: nothing downstream re-checks these rules; a `NewDelivery` exists only
//! if every rule held.

use std::collections::BTreeMap;

use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::time::Duration;

use spool_proto::{headers, units, CreateDelivery, DeliveryMode, ErrorCode, Reconcile};
use spool_store::model::{self, Body, Millis, Mode, NewDelivery};
use url::Url;

use crate::characters::Unwanted;
use crate::deliveries::outbound::{literal_ip, AddressPolicy};
use crate::deliveries::reconcile;

/// A refused request: the code and message for the error envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub code: ErrorCode,
    pub message: String,
}

fn reject(code: ErrorCode, message: impl Into<String>) -> Rejection {
    Rejection {
        code,
        message: message.into(),
    }
}

fn invalid(message: impl Into<String>) -> Rejection {
    reject(ErrorCode::InvalidDelivery, message)
}

/// Decode exactly one JSON object.
pub fn decode(bytes: &[u8]) -> Result<CreateDelivery, Rejection> {
    if bytes.len() > spool_proto::MAX_REQUEST_BYTES {
        return Err(reject(
            ErrorCode::InvalidRequest,
            "decode JSON: request body too large",
        ));
    }
    serde_json::from_slice::<Option<CreateDelivery>>(bytes)
        .map(Option::unwrap_or_default)
        .map_err(|e| {
            let message = if e.to_string().starts_with("trailing characters") {
                "request body must contain one JSON object".to_owned()
            } else if e.is_eof() && bytes.iter().all(u8::is_ascii_whitespace) {
                "decode JSON: EOF".to_owned()
            } else {
                format!("decode JSON: {e}")
            };
            reject(ErrorCode::InvalidRequest, message)
        })
}

/// A target's origin as deliveries are grouped by it: `scheme://host:port`, the host in lower
/// case and the port always written.
pub fn origin_of(url: &url::Url, host: &str) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        host.to_ascii_lowercase(),
        url.port_or_known_default().unwrap_or(0)
    )
}

/// A target as an operator names it in a filter (`https://hooks.example.com`, with a path or
/// not), as its origin; `None` if it is not an http(s) URL with a host.
pub fn origin_filter(text: &str) -> Option<String> {
    let url = url::Url::parse(text.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let host = url.host_str().filter(|h| !h.is_empty())?.to_owned();
    Some(origin_of(&url, &host))
}

/// A target as an operator names it: an origin (`https://hooks.example.com`, or with the path
/// `/` only), or one URL of it (any other path: its deliveries with any query).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFilter {
    pub origin: String,
    /// The URL without its query and fragment, when a path was given.
    pub url: Option<String>,
}

/// See [`TargetFilter`]; `None` if `text` is not an http(s) URL with a host.
pub fn target_filter(text: &str) -> Option<TargetFilter> {
    let mut url = url::Url::parse(text.trim()).ok()?;
    let origin = origin_filter(text)?;
    url.set_query(None);
    url.set_fragment(None);
    let url = (url.path() != "/").then(|| url.as_str().to_owned());
    Some(TargetFilter { origin, url })
}

/// What a create is judged by besides its own fields.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub policy: AddressPolicy,
    /// `--retry-window`: the default schedule's time budget (`None`: spoold v0.1.0's 8
    /// attempts).
    pub retry_window: Option<std::time::Duration>,
}

pub fn validate(mut req: CreateDelivery, rules: &Rules) -> Result<NewDelivery, Rejection> {
    let policy = &rules.policy;
    let body = decode_body(&req)?;
    let at_most_once = AtMostOnce {
        mode: req.mode.take(),
        fingerprint: req.fingerprint.take(),
        reconcile: req.reconcile.take(),
        remote_id_pointer: req.remote_id_pointer.take(),
    };

    // spoold v0.1.0 took any key; a NUL cannot be stored (PostgreSQL's text refuses it), and
    // is refused before it is trimmed away or not.
    if req
        .idempotency_key
        .as_deref()
        .is_some_and(|k| k.contains('\0'))
    {
        return Err(invalid("idempotency key must not contain a NUL byte"));
    }
    let idempotency_key = req
        .idempotency_key
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty());
    if idempotency_key
        .as_ref()
        .is_some_and(|k| k.len() > spool_proto::MAX_KEY_BYTES)
    {
        return Err(invalid("idempotency key must not exceed 256 bytes"));
    }

    let url = parse_target(req.target_url.as_deref().unwrap_or_default())?;
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err(invalid("target URL must include a host"));
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("target URL must not include user information"));
    }
    if url.fragment().is_some() {
        return Err(invalid("target URL must not include a fragment"));
    }
    let target_url = url.as_str().to_owned();
    let origin = origin_of(&url, host);
    if let Some(ip) = literal_ip(&url) {
        policy.check(ip).map_err(|denied| {
            reject(
                ErrorCode::TargetBlocked,
                format!("target URL is not allowed: {denied}; {}", denied.remedy()),
            )
        })?;
    }

    // Spaces around are forgiven; anything else that is not a token is refused (the OpenAPI
    // document says exactly this).
    let method = req
        .method
        .unwrap_or_default()
        .trim_matches(' ')
        .to_ascii_uppercase();
    let method = if method.is_empty() {
        "POST".to_owned()
    } else {
        method
    };
    if !headers::is_token(&method) {
        return Err(invalid("method contains invalid characters"));
    }

    // An explicit maxAttempts means what it says. Without one, the default schedule is a time
    // budget (--retry-window, up to 100 attempts), so that it outlasts hours of downtime.
    let explicit_attempts = match req.max_attempts.unwrap_or(0) {
        0 => None,
        n if (1..=i64::from(spool_proto::MAX_MAX_ATTEMPTS)).contains(&n) => Some(n as u32),
        _ => return Err(invalid("max attempts must be between 1 and 100")),
    };

    let headers = normalize_headers(req.headers.unwrap_or_default())?;

    if body.bytes().len() > spool_proto::MAX_BODY_BYTES {
        return Err(invalid("body must not exceed 1048576 bytes"));
    }

    let not_before = parse_time_field("notBefore", req.not_before.as_deref())?;
    let expires_at = parse_time_field("expiresAt", req.expires_at.as_deref())?;
    // Whether expiresAt is still ahead is judged by the store, after the idempotency key: a
    // job retrying its create after the deadline must find the original.
    if let Some(exp) = expires_at {
        if not_before.is_some_and(|nb| nb >= exp) {
            return Err(invalid("notBefore must be earlier than expiresAt"));
        }
    }

    let (max_attempts, retry_window_ms) = match (explicit_attempts, rules.retry_window) {
        (Some(n), _) => (n, None),
        (None, Some(window)) => (
            spool_proto::MAX_MAX_ATTEMPTS,
            expires_at.is_none().then_some(window.as_millis() as Millis),
        ),
        (None, None) => (spool_proto::DEFAULT_MAX_ATTEMPTS, None),
    };
    let options = at_most_once.validate(idempotency_key.as_deref(), policy)?;
    let sign_secret = match req.sign {
        None => None,
        Some(spool_proto::Sign { secret_ref: None }) => {
            return Err(invalid("sign.secretRef is required"));
        }
        Some(spool_proto::Sign {
            secret_ref: Some(name),
        }) if crate::deliveries::targets::is_secret_name(&name) => Some(name),
        Some(_) => {
            return Err(invalid(
                "sign.secretRef must be 1 to 64 letters, digits, '_', '.' or '-'",
            ))
        }
    };
    let request_digest = digest(
        &method,
        &target_url,
        // As before the retry window existed, so that keys stored then still match.
        explicit_attempts.unwrap_or(spool_proto::DEFAULT_MAX_ATTEMPTS),
        &headers,
        &body,
        not_before,
        expires_at,
        &options,
        sign_secret.as_deref(),
    );
    Ok(NewDelivery {
        id: uuid::Uuid::now_v7().simple().to_string(),
        idempotency_key,
        target_url,
        origin,
        method,
        headers,
        body,
        max_attempts,
        not_before,
        expires_at,
        retry_window_ms,
        request_digest,
        // The create handler sets it: it has the request as it came.
        v010_request_hashes: Vec::new(),
        mode: options.mode,
        fingerprint: options.fingerprint,
        reconcile: options.reconcile,
        remote_id_pointer: options.remote_id_pointer,
        observation_window_ms: options.observation_window_ms,
        sign_secret,
    })
}

/// The fields of a create that only some deliveries use, as submitted.
struct AtMostOnce {
    mode: Option<DeliveryMode>,
    fingerprint: Option<String>,
    reconcile: Option<Reconcile>,
    remote_id_pointer: Option<String>,
}

/// The same, checked and normalised.
#[derive(Debug, Default)]
struct Options {
    mode: Mode,
    fingerprint: Option<String>,
    /// The normalised `reconcile` object as JSON.
    reconcile: Option<String>,
    remote_id_pointer: Option<String>,
    observation_window_ms: Option<Millis>,
}

/// The longest observation window: a month of watching is already a person's job.
const MAX_OBSERVATION_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

impl AtMostOnce {
    fn validate(
        self,
        idempotency_key: Option<&str>,
        policy: &AddressPolicy,
    ) -> Result<Options, Rejection> {
        let mode = match self.mode.unwrap_or_default() {
            DeliveryMode::AtLeastOnce => Mode::AtLeastOnce,
            DeliveryMode::AtMostOnce => Mode::AtMostOnce,
        };
        let remote_id_pointer = self
            .remote_id_pointer
            .map(|p| check_pointer("remoteIdPointer", p))
            .transpose()?;
        // The business key a target is searched by: as a task's key, nothing hidden in it.
        if let Some(u) = self.fingerprint.as_deref().and_then(Unwanted::find) {
            return Err(invalid(format!("fingerprint must not contain {u}")));
        }
        let fingerprint = self
            .fingerprint
            .map(|f| f.trim().to_owned())
            .filter(|f| !f.is_empty());
        if mode == Mode::AtLeastOnce {
            if fingerprint.is_some() || self.reconcile.is_some() {
                return Err(invalid(
                    "fingerprint and reconcile apply only to mode at_most_once",
                ));
            }
            return Ok(Options {
                remote_id_pointer,
                ..Options::default()
            });
        }
        if fingerprint
            .as_ref()
            .is_some_and(|f| f.len() > spool_proto::MAX_KEY_BYTES)
        {
            return Err(invalid("fingerprint must not exceed 256 bytes"));
        }
        let fingerprint = fingerprint.or_else(|| idempotency_key.map(str::to_owned));
        let (reconcile, window) = match self.reconcile {
            None => (None, None),
            Some(spec) => {
                let (spec, window) = check_reconcile(spec, fingerprint.is_some(), policy)?;
                let json =
                    serde_json::to_string(&spec).map_err(|e| invalid(format!("reconcile: {e}")))?;
                (Some(json), window)
            }
        };
        Ok(Options {
            mode,
            fingerprint,
            reconcile,
            remote_id_pointer,
            observation_window_ms: Some(window.map_or(model::DEFAULT_OBSERVATION_WINDOW_MS, |w| {
                w.as_millis() as Millis
            })),
        })
    }
}

/// Check a `reconcile` object and fill in its defaults.
fn check_reconcile(
    spec: Reconcile,
    has_fingerprint: bool,
    policy: &AddressPolicy,
) -> Result<(Reconcile, Option<Duration>), Rejection> {
    let template = spec.url.unwrap_or_default();
    let template = template.trim();
    if template.is_empty() {
        return Err(invalid("reconcile.url is required"));
    }
    if template.len() > spool_proto::MAX_URL_BYTES {
        return Err(invalid("reconcile.url must not exceed 4096 bytes"));
    }
    let uses = reconcile::placeholders(template).map_err(|name| {
        invalid(format!(
            "reconcile.url: unknown placeholder {{{name}}}; use {{fingerprint}} or {{deliveryId}}"
        ))
    })?;
    if uses.fingerprint && !has_fingerprint {
        return Err(invalid(
            "reconcile.url uses {fingerprint}, but the delivery has none: set fingerprint or idempotencyKey",
        ));
    }
    // Judged with stand-in values: the address the check will dial is the same whatever they
    // are, because a value may only stand in the path or the query (percent-encoded, it cannot
    // leave them). In the host or port it would choose where the check goes.
    let authority = template.split_once("://").map_or("", |(_, rest)| {
        rest.split(['/', '?', '#']).next().unwrap_or_default()
    });
    if authority.contains(['{', '}']) {
        return Err(invalid(
            "reconcile.url: {fingerprint} and {deliveryId} may stand only in the path or query, \
             not in the host or port",
        ));
    }
    let sample = reconcile::expand(template, "fingerprint", "0123456789abcdef0123456789abcdef");
    let url = parse_target(&sample).map_err(|r| Rejection {
        code: r.code,
        message: format!(
            "reconcile.url: {}",
            r.message.trim_start_matches("target URL ")
        ),
    })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("reconcile.url must not include user information"));
    }
    if let Some(ip) = literal_ip(&url) {
        policy.check(ip).map_err(|denied| {
            reject(
                ErrorCode::TargetBlocked,
                format!(
                    "reconcile.url is not allowed: {denied}; {}",
                    denied.remedy()
                ),
            )
        })?;
    }
    let method = spec
        .method
        .unwrap_or_default()
        .trim_matches(' ')
        .to_ascii_uppercase();
    let method = if method.is_empty() {
        "GET".to_owned()
    } else {
        method
    };
    if !headers::is_token(&method) {
        return Err(invalid("reconcile.method contains invalid characters"));
    }
    let headers = normalize_headers(spec.headers.unwrap_or_default())
        .map_err(|r| invalid(format!("reconcile: {}", r.message)))?;
    let window = spec
        .observation_window
        .map(|w| {
            units::parse_duration(&w)
                .ok()
                .filter(|d| *d >= Duration::from_secs(1) && *d <= MAX_OBSERVATION_WINDOW)
                .ok_or_else(|| {
                    invalid(
                        "reconcile.observationWindow must be a duration from 1s to 720h, e.g. 1h",
                    )
                })
        })
        .transpose()?;
    let spec = Reconcile {
        url: Some(template.to_owned()),
        method: Some(method),
        headers: Some(headers.into_iter().map(|(n, v)| (n, Some(v))).collect()),
        matches_pointer: Some(check_pointer(
            "reconcile.matchesPointer",
            spec.matches_pointer.unwrap_or_default(),
        )?),
        remote_id_pointer: Some(check_pointer(
            "reconcile.remoteIdPointer",
            spec.remote_id_pointer.unwrap_or_else(|| "/id".to_owned()),
        )?),
        observation_window: Some(units::format_duration(window.unwrap_or(
            Duration::from_millis(model::DEFAULT_OBSERVATION_WINDOW_MS as u64),
        ))),
    };
    Ok((spec, window))
}

/// An RFC 6901 JSON pointer: empty (the whole document) or `/`-separated, at most 256 bytes.
fn check_pointer(name: &str, pointer: String) -> Result<String, Rejection> {
    if pointer.len() > spool_proto::MAX_KEY_BYTES {
        return Err(invalid(format!("{name} must not exceed 256 bytes")));
    }
    if pointer.contains('\0') {
        return Err(invalid(format!("{name} must not contain a NUL byte")));
    }
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(invalid(format!(
            "{name} must be a JSON pointer: empty or starting with \"/\", as in /data/0/id"
        )));
    }
    // `~` may only escape `0` (`~`) or `1` (`/`).
    let bytes = pointer.as_bytes();
    if bytes
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'~' && !matches!(bytes.get(i + 1), Some(b'0' | b'1')))
    {
        return Err(invalid(format!(
            "{name}: \"~\" must be followed by 0 or 1 (RFC 6901)"
        )));
    }
    Ok(pointer)
}

/// The target URL exactly as it will be dialed (the parser's normal form), or why not. Spellings
/// the URL parser would silently repair are refused instead, so that what is stored and shown
/// is what is dialed: a missing or extra slash after the scheme (`http:/x`, `http:x`,
/// `http:///x` all become host `x`), backslashes (read as slashes), and tabs, newlines and
/// other control characters (stripped).
fn parse_target(raw: &str) -> Result<Url, Rejection> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(invalid("target URL is required"));
    }
    if raw.len() > spool_proto::MAX_URL_BYTES {
        return Err(invalid("target URL must not exceed 4096 bytes"));
    }
    if raw.chars().any(|c| c.is_control() || c == ' ') {
        return Err(invalid(
            "target URL must not contain spaces or control characters (percent-encode them)",
        ));
    }
    if raw.contains('\\') {
        return Err(invalid("target URL must not contain backslashes"));
    }
    let needs_scheme = || {
        invalid(format!(
            "target URL needs http:// or https://, as in http://{raw}"
        ))
    };
    let Some((scheme, rest)) = raw.split_once(':') else {
        return Err(needs_scheme());
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        // `localhost:9000/hook` reads as scheme "localhost": what was meant is a host.
        return Err(if rest.starts_with("//") {
            invalid("target URL must use http or https")
        } else {
            needs_scheme()
        });
    }
    let Some(authority) = rest.strip_prefix("//") else {
        return Err(invalid(format!(
            "target URL must have \"//\" after \"{scheme}:\", as in {scheme}://host/path"
        )));
    };
    if authority.is_empty() || authority.starts_with(['/', '?', '#', ':']) {
        return Err(invalid("target URL must include a host"));
    }
    let url = Url::parse(raw).map_err(|e| invalid(format!("parse target URL: {e}")))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("target URL must include a host"));
    }
    // The normal form is what is stored (and exported, and checked again on import): it is
    // longer than the given one where the parser percent-encodes (`é` → `%C3%A9`).
    if url.as_str().len() > spool_proto::MAX_URL_BYTES {
        return Err(invalid(
            "target URL must not exceed 4096 bytes once percent-encoded",
        ));
    }
    Ok(url)
}

fn decode_body(req: &CreateDelivery) -> Result<Body, Rejection> {
    match (&req.body, &req.body_base64) {
        (Some(_), Some(_)) => Err(reject(
            ErrorCode::InvalidRequest,
            "body and bodyBase64 cannot be used together",
        )),
        (Some(raw), None) => Ok(Body::Json(raw.get().as_bytes().to_vec())),
        (None, Some(b64)) => {
            // Line breaks are tolerated, as in spoold; anything else must be strict base64.
            let compact: String = b64.chars().filter(|c| *c != '\r' && *c != '\n').collect();
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map(Body::Binary)
                .map_err(|_| {
                    reject(
                        ErrorCode::InvalidRequest,
                        "bodyBase64 must contain valid standard base64",
                    )
                })
        }
        (None, None) => Ok(Body::None),
    }
}

fn parse_time_field(name: &str, value: Option<&str>) -> Result<Option<Millis>, Rejection> {
    value
        .map(|v| {
            units::parse_time(v).map_err(|_| {
                invalid(format!(
                    "{name} must be an RFC 3339 time, e.g. 2026-07-18T12:00:00Z"
                ))
            })
        })
        .transpose()
}

fn normalize_headers(
    raw: BTreeMap<String, Option<String>>,
) -> Result<Vec<(String, String)>, Rejection> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in raw {
        let trimmed = name.trim_matches(' ');
        if trimmed.is_empty() || !headers::is_token(trimmed) {
            return Err(invalid(format!("invalid header name {name:?}")));
        }
        let canonical = headers::canonical_name(trimmed);
        if spool_proto::MANAGED_HEADERS
            .iter()
            .any(|m| m.eq_ignore_ascii_case(&canonical))
        {
            return Err(invalid(format!(
                "header {canonical:?} is managed by spoold"
            )));
        }
        let value = value.unwrap_or_default();
        if value.contains(['\r', '\n']) {
            return Err(invalid(format!("header {canonical:?} contains a newline")));
        }
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(invalid(format!(
                "header {canonical:?} contains a control character"
            )));
        }
        if out.insert(canonical.clone(), value).is_some() {
            return Err(invalid(format!(
                "header {canonical:?} is duplicated after canonicalization"
            )));
        }
    }
    Ok(out.into_iter().collect())
}

/// What a create request `new` changes of `existing`, the delivery its idempotency key
/// already names: the fields of the digest ([`digest`]) that differ, by their wire names, each
/// with both values where they are short and hold no secret (`expiresAt (2026-12-07T03:00:00Z
/// there, 2026-12-07T04:00:00Z here)`); the URL, headers and body are only named. Empty when
/// nothing differs that can be seen here (a retry cleared a past `expiresAt`, say).
pub fn differences(new: &NewDelivery, existing: &model::Delivery) -> Vec<String> {
    fn both<T: PartialEq>(
        out: &mut Vec<String>,
        name: &str,
        ours: T,
        theirs: T,
        show: impl Fn(T) -> String,
    ) {
        if ours != theirs {
            out.push(format!(
                "{name} ({} there, {} here)",
                show(theirs),
                show(ours)
            ));
        }
    }
    let time = |t: Option<Millis>| t.map_or_else(|| "none".to_owned(), units::format_time);
    let text = |t: Option<&str>| t.map_or_else(|| "none".to_owned(), |t| format!("{t:?}"));
    let mut out = Vec::new();
    both(&mut out, "method", &new.method, &existing.method, |m| {
        m.clone()
    });
    if new.target_url != existing.target_url {
        out.push("targetUrl".to_owned());
    }
    if existing.headers.as_ref().is_some_and(|h| *h != new.headers) {
        out.push("headers".to_owned());
    }
    if existing.body.as_ref().is_some_and(|b| *b != new.body) {
        out.push("body".to_owned());
    }
    both(
        &mut out,
        "maxAttempts",
        new.max_attempts,
        existing.max_attempts,
        |n| n.to_string(),
    );
    both(
        &mut out,
        "notBefore",
        new.not_before,
        existing.not_before,
        time,
    );
    // Without its own, a delivery's expiresAt is the store's (created + the retry window): not
    // something the request asked for.
    if new.retry_window_ms.is_none() {
        both(
            &mut out,
            "expiresAt",
            new.expires_at,
            existing.expires_at,
            time,
        );
    }
    both(&mut out, "mode", new.mode, existing.mode, |m| {
        m.as_str().to_owned()
    });
    for (name, ours, theirs) in [
        ("fingerprint", &new.fingerprint, &existing.fingerprint),
        ("reconcile", &new.reconcile, &existing.reconcile),
        (
            "remoteIdPointer",
            &new.remote_id_pointer,
            &existing.remote_id_pointer,
        ),
    ] {
        if ours != theirs {
            out.push(name.to_owned());
        }
    }
    both(
        &mut out,
        "sign.secretRef",
        new.sign_secret.as_deref(),
        existing.sign_secret.as_deref(),
        text,
    );
    out
}

/// Digest of every field that makes two requests the same for idempotency (all but the key).
/// Each field is length-prefixed so no two different requests can share an encoding. Fields
/// added later are appended only when set, so that keys stored before them still match.
#[allow(
    clippy::too_many_arguments,
    reason = "one argument per field of the request; the digest is their only consumer"
)]
fn digest(
    method: &str,
    url: &str,
    max_attempts: u32,
    headers: &[(String, String)],
    body: &Body,
    not_before: Option<Millis>,
    expires_at: Option<Millis>,
    options: &Options,
    sign_secret: Option<&str>,
) -> Vec<u8> {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update(bytes.len().to_string().as_bytes());
        h.update(b":");
        h.update(bytes);
    };
    field(b"spoold-request-v1");
    field(method.as_bytes());
    field(url.as_bytes());
    field(max_attempts.to_string().as_bytes());
    field(headers.len().to_string().as_bytes());
    for (name, value) in headers {
        field(name.as_bytes());
        field(value.as_bytes());
    }
    let kind: &[u8] = match body {
        Body::None => b"none",
        Body::Json(_) => b"json",
        Body::Binary(_) => b"binary",
    };
    field(kind);
    field(body.bytes());
    field(
        not_before
            .map(|t| t.to_string())
            .unwrap_or_default()
            .as_bytes(),
    );
    field(
        expires_at
            .map(|t| t.to_string())
            .unwrap_or_default()
            .as_bytes(),
    );
    if options.mode != Mode::AtLeastOnce || options.remote_id_pointer.is_some() {
        field(b"v2");
        field(options.mode.as_str().as_bytes());
        for text in [
            &options.fingerprint,
            &options.reconcile,
            &options.remote_id_pointer,
        ] {
            match text {
                Some(t) => field(t.as_bytes()),
                None => field(b"-"),
            }
        }
    }
    // Added after the rest, so that the digests of requests without it stay as they were.
    if let Some(name) = sign_secret {
        field(b"sign");
        field(name.as_bytes());
    }
    h.finalize().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Rules that let every address through (the tests' targets are loopback).
    fn any_address() -> Rules {
        Rules {
            policy: AddressPolicy {
                allow_all: true,
                allowed: vec![],
            },
            retry_window: None,
        }
    }

    fn check(req: serde_json::Value) -> Result<NewDelivery, Rejection> {
        let bytes = serde_json::to_vec(&req).expect("serializable");
        validate(decode(&bytes)?, &any_address())
    }

    fn rejected(req: serde_json::Value) -> (ErrorCode, String) {
        let r = check(req).expect_err("must be rejected");
        (r.code, r.message)
    }

    #[test]
    fn defaults_and_normalisation() {
        let d = check(json!({
            "targetUrl": "  HTTPS://Example.COM/hook  ",
            "method": " put ",
            "headers": {"x-api-KEY": "v", "content-type": "text/plain"},
            "idempotencyKey": "  k1 ",
        }))
        .expect("valid");
        // Stored as dialed: the parser's normal form.
        assert_eq!(d.target_url, "https://example.com/hook");
        assert_eq!(d.origin, "https://example.com:443");
        assert_eq!(d.method, "PUT");
        assert_eq!(d.max_attempts, 8);
        assert_eq!(d.idempotency_key.as_deref(), Some("k1"));
        assert_eq!(
            d.headers,
            vec![
                ("Content-Type".to_owned(), "text/plain".to_owned()),
                ("X-Api-Key".to_owned(), "v".to_owned())
            ]
        );
        assert_eq!(d.id.len(), 32);
        assert!(d
            .id
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        let d = check(json!({"targetUrl": "http://127.0.0.1/", "method": ""})).expect("valid");
        assert_eq!(d.method, "POST");
    }

    #[test]
    fn request_level_rejections() {
        let policy = Rules::default();
        let cases: &[(&[u8], &str)] = &[
            (b"", "decode JSON: EOF"),
            (b"{", "decode JSON"),
            (b"{} {}", "request body must contain one JSON object"),
            (b"{\"nope\":1}", "unknown field"),
            (b"{\"maxAttempts\":\"3\"}", "decode JSON"),
            (b"{\"maxAttempts\":5.5}", "decode JSON"),
            (b"[1]", "decode JSON"),
        ];
        for (bytes, want) in cases {
            let r = decode(bytes)
                .and_then(|req| validate(req, &policy))
                .expect_err("must be rejected");
            assert_eq!(r.code, ErrorCode::InvalidRequest, "{bytes:?}");
            assert!(r.message.contains(want), "{bytes:?}: {}", r.message);
        }
        let big = vec![b' '; spool_proto::MAX_REQUEST_BYTES + 1];
        assert!(decode(&big)
            .expect_err("too big")
            .message
            .contains("too large"));
        assert_eq!(
            rejected(json!({"targetUrl":"http://127.0.0.1/","body":{},"bodyBase64":""})).0,
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            rejected(json!({"targetUrl":"http://127.0.0.1/","bodyBase64":"abc"})).0,
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            rejected(json!({"targetUrl":"http://127.0.0.1/","bodyBase64":"AB=="})).0,
            ErrorCode::InvalidRequest,
            "non-zero trailing bits"
        );
    }

    /// The URL stored is the URL dialed: spellings the parser would repair are refused, the
    /// rest are stored in the parser's normal form.
    #[test]
    fn target_urls_are_stored_as_dialed_or_refused() {
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("http:///x", Err("must include a host")),
            ("http://:80/", Err("must include a host")),
            ("http://?q", Err("must include a host")),
            ("http:/x", Err(r#"must have "//" after "http:""#)),
            ("http:x", Err(r#"must have "//" after "http:""#)),
            ("https:x.test/y", Err(r#"must have "//" after "https:""#)),
            (r"http://127.0.0.1\x", Err("backslashes")),
            (r"http:\\h/x", Err("backslashes")),
            ("http://127.0.0.1/a\tb", Err("control characters")),
            ("http://127.0.0.1/a\nb", Err("control characters")),
            ("http://127.0.0.1\r/", Err("control characters")),
            ("http://127.0.0.1/a b", Err("spaces")),
            (
                "localhost:9000/hook",
                Err("needs http:// or https://, as in http://localhost:9000/hook"),
            ),
            ("hooks.test/x", Err("needs http:// or https://")),
            ("ftp://h/", Err("must use http or https")),
            (
                "HTTP://Example.TEST:80/a/./b/../c?q=1",
                Ok("http://example.test/a/c?q=1"),
            ),
            ("http://127.0.0.1", Ok("http://127.0.0.1/")),
            ("  https://127.0.0.1:443/x  ", Ok("https://127.0.0.1/x")),
            (
                "http://127.0.0.1/%7e?x=%20",
                Ok("http://127.0.0.1/%7e?x=%20"),
            ),
            ("http://b\u{fc}cher.test/", Ok("http://xn--bcher-kva.test/")),
            ("http://[::1]:8080/x", Ok("http://[::1]:8080/x")),
            ("http://2130706433/", Ok("http://127.0.0.1/")),
            (
                &format!("http://h.test/{}", "\u{e9}".repeat(1500)),
                Err("must not exceed 4096 bytes once percent-encoded"),
            ),
        ];
        let open = Rules {
            policy: AddressPolicy {
                allow_all: true,
                allowed: Vec::new(),
            },
            retry_window: None,
        };
        for (input, want) in cases {
            let got = validate(
                decode(&serde_json::to_vec(&json!({ "targetUrl": input })).expect("json"))
                    .expect("decodes"),
                &open,
            );
            match (want, got) {
                (Ok(stored), Ok(new)) => {
                    assert_eq!(new.target_url, *stored, "{input:?}");
                    let dialed = Url::parse(&new.target_url).expect("stored URL parses");
                    assert_eq!(dialed.as_str(), *stored, "{input:?}: stored is dialed");
                }
                (Err(part), Err(r)) => {
                    assert_eq!(r.code, ErrorCode::InvalidDelivery, "{input:?}");
                    assert!(r.message.contains(part), "{input:?}: {}", r.message);
                }
                (want, got) => panic!("{input:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn field_rules() {
        let long_key = "k".repeat(257);
        let long_url = format!("http://127.0.0.1/{}", "a".repeat(4096));
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (json!({}), "target URL is required"),
            (json!({"targetUrl":"   "}), "target URL is required"),
            (json!({"targetUrl": long_url}), "must not exceed 4096 bytes"),
            (json!({"targetUrl":"ftp://h/"}), "must use http or https"),
            (
                json!({"targetUrl":"not a url"}),
                "spaces or control characters",
            ),
            (
                json!({"targetUrl":"http://u:p@127.0.0.1/"}),
                "user information",
            ),
            (json!({"targetUrl":"http://127.0.0.1/#frag"}), "fragment"),
            (
                json!({"targetUrl":"http://127.0.0.1/","idempotencyKey": long_key}),
                "256 bytes",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","idempotencyKey": "a\u{0}b"}),
                "idempotency key must not contain a NUL byte",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","idempotencyKey": " k \u{0}"}),
                "NUL",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","mode":"at_most_once",
                       "fingerprint":"order\n1"}),
                "fingerprint must not contain the control character '\\n'",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","mode":"at_most_once",
                       "fingerprint":"order-1\u{202E}"}),
                "fingerprint must not contain the invisible character U+202E",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","remoteIdPointer":"/id\u{0}"}),
                "remoteIdPointer must not contain a NUL byte",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","method":"GE T"}),
                "invalid characters",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","method":"GET/"}),
                "invalid characters",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","maxAttempts":101}),
                "between 1 and 100",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","maxAttempts":-1}),
                "between 1 and 100",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"":"v"}}),
                "invalid header name",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"a b":"v"}}),
                "invalid header name",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"host":"v"}}),
                "managed by spoold",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"X-SPOOLD-ATTEMPT":"1"}}),
                "managed",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"x-spoold-delivery-id":"1"}}),
                "managed",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"Transfer-Encoding":"x"}}),
                "managed",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"KEEP-alive":"5"}}),
                "managed",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{" tE ":"trailers"}}),
                "managed",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"A":"x\r\ny"}}),
                "newline",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"A":"x\u{0}"}}),
                "control character",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","headers":{"a":"1","A":"2"}}),
                "duplicated",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","notBefore":"tomorrow"}),
                "RFC 3339",
            ),
            (
                json!({"targetUrl":"http://127.0.0.1/","notBefore":"2030-01-02T00:00:00Z",
                       "expiresAt":"2030-01-01T00:00:00Z"}),
                "earlier than expiresAt",
            ),
        ];
        for (req, want) in cases {
            let (code, message) = rejected(req.clone());
            assert_eq!(code, ErrorCode::InvalidDelivery, "{req}");
            assert!(message.contains(want), "{req}: {message}");
        }
        // spoold v0.1.0 took any key but a NUL, which no database here can keep: so does this.
        for key in ["line\nbreak", "tab\tand\u{1b}[31m", "zero\u{200B}width"] {
            let new = check(json!({"targetUrl":"http://127.0.0.1/","idempotencyKey": key}))
                .unwrap_or_else(|r| panic!("{key:?}: {}", r.message));
            assert_eq!(new.idempotency_key.as_deref(), Some(key));
        }
        let big = "a".repeat(spool_proto::MAX_BODY_BYTES);
        let (code, message) = rejected(json!({"targetUrl":"http://127.0.0.1/","body": big}));
        assert_eq!(code, ErrorCode::InvalidDelivery);
        assert!(message.contains("1048576"), "{message}");
    }

    #[test]
    fn blocked_literal_targets_are_refused_at_submission() {
        let policy = Rules::default();
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::]/",
            "http://10.0.0.1:8080/", // blocked by the policy: never dialled
        ] {
            let req = decode(format!(r#"{{"targetUrl":"{url}"}}"#).as_bytes()).expect("json");
            let r = validate(req, &policy).expect_err(url);
            assert_eq!(r.code, ErrorCode::TargetBlocked, "{url}");
        }
    }

    /// A reconciliation URL is judged once, with stand-in values: a value must not be able to
    /// choose the host or port it goes to.
    #[test]
    fn reconcile_placeholders_stand_only_in_path_or_query() {
        let reconcile = |url: &str| {
            check(
                json!({"targetUrl": "https://hooks.test/", "mode": "at_most_once",
                         "fingerprint": "127.0.0.1", "reconcile": {"url": url}}),
            )
        };
        for url in [
            "https://{fingerprint}/x",
            "https://a{deliveryId}.test/",
            "https://api.test:{fingerprint}/",
            "https://{fingerprint}",
        ] {
            let r = reconcile(url).expect_err(url);
            assert!(
                r.message.contains("only in the path or query"),
                "{url}: {}",
                r.message
            );
        }
        for url in [
            "https://api.test/{fingerprint}",
            "https://api.test?f={fingerprint}#",
            "https://api.test/d/{deliveryId}?f={fingerprint}",
        ] {
            assert!(reconcile(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn bodies_keep_their_bytes() {
        let raw = br#"{"targetUrl":"http://127.0.0.1/","body":  {"a" :[1, 2 ], "s":"<&>"}  }"#;
        let d = validate(decode(raw).expect("json"), &any_address()).expect("valid");
        assert_eq!(d.body, Body::Json(br#"{"a" :[1, 2 ], "s":"<&>"}"#.to_vec()));
        let d =
            check(json!({"targetUrl":"http://127.0.0.1/","bodyBase64":"AP8K\r\n"})).expect("valid");
        assert_eq!(d.body, Body::Binary(vec![0x00, 0xff, 0x0a]));
        let d = check(json!({"targetUrl":"http://127.0.0.1/","body":null})).expect("valid");
        assert_eq!(d.body, Body::Json(b"null".to_vec()));
    }

    #[test]
    fn fingerprint_covers_every_field_but_the_key() {
        let base = json!({"targetUrl":"http://127.0.0.1/","body":{"a":1},"idempotencyKey":"k"});
        let fp = |v: serde_json::Value| check(v).expect("valid").request_digest;
        let reference = fp(base.clone());
        let mut same = base.clone();
        same["idempotencyKey"] = json!("other");
        assert_eq!(fp(same), reference);
        for (field, value) in [
            ("method", json!("PUT")),
            ("targetUrl", json!("http://127.0.0.1/x")),
            ("maxAttempts", json!(3)),
            ("headers", json!({"A":"1"})),
            ("body", json!({"a":2})),
            ("notBefore", json!("2031-01-01T00:00:00Z")),
            ("expiresAt", json!("2031-01-01T00:00:00Z")),
        ] {
            let mut changed = base.clone();
            changed[field] = value;
            assert_ne!(fp(changed), reference, "{field}");
        }
        let mut b64 = base.clone();
        b64.as_object_mut().expect("object").remove("body");
        b64["bodyBase64"] = json!("eyJhIjoxfQ=="); // the same bytes, as binary
        assert_ne!(fp(b64), reference);
    }
}

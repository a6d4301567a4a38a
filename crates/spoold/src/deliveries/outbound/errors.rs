//! Transport failures told for an operator: one line naming what was tried, where, and why
//! (`connect to 127.0.0.1:9: connection refused`), with the stable [`SendErrorCode`] beside it.
//! The HTTP client's own error chain (`error sending request for url (…): client error
//! (Connect): tcp connect error: …`) never reaches `lastError`.

use std::time::Duration;

use url::Url;

use super::{policy::Denied, ResolveError, SendError, SendErrorCode};

/// Why a request to `url` got no response.
pub(super) fn describe(err: &reqwest::Error, url: &Url) -> SendError {
    let place = host_port(url);
    let mut code = if err.is_timeout() {
        SendErrorCode::Timeout
    } else if err.is_connect() {
        SendErrorCode::ConnectFailed
    } else {
        SendErrorCode::RequestFailed
    };
    let mut message = None;
    let mut innermost: Option<String> = None;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(r) = e.downcast_ref::<ResolveError>() {
            return resolve_failure(r);
        }
        if let Some(tls) = as_tls_error(e) {
            code = SendErrorCode::TlsFailed;
            message = Some(format!(
                "TLS handshake with {place}: {}",
                tls_cause(tls, url)
            ));
            break;
        }
        innermost = Some(clean(&e.to_string()));
        source = e.source();
    }
    let cause = innermost.unwrap_or_else(|| "failed".into());
    let message = message.unwrap_or_else(|| match code {
        SendErrorCode::ConnectFailed => format!("connect to {place}: {cause}"),
        SendErrorCode::Timeout => format!("connect to {place}: {cause}"),
        _ => format!("request to {place} failed: {cause}"),
    });
    SendError {
        code,
        message,
        // A failure to connect (TLS handshakes included) wrote nothing the application could
        // see; anything later may have.
        may_have_arrived: !err.is_connect(),
        answered: None,
    }
}

/// No complete response came within `limit`.
pub(super) fn timed_out(limit: Duration, why: &str) -> SendError {
    SendError {
        code: SendErrorCode::Timeout,
        // The connection may have been made and the request written before time ran out.
        may_have_arrived: true,
        answered: None,
        message: format!(
            "no response within {} ({why})",
            spool_proto::units::format_duration(limit)
        ),
    }
}

/// An address the policy refuses, with the flag that would open it.
pub(super) fn blocked(name: Option<&str>, denied: &Denied) -> SendError {
    let what = match name {
        Some(host) => format!(
            "{host} resolves to {}, which is blocked ({})",
            denied.addr, denied.rule
        ),
        None => denied.to_string(),
    };
    SendError {
        code: SendErrorCode::TargetBlocked,
        message: format!("{what}; {}", denied.remedy()),
        may_have_arrived: false,
        answered: None,
    }
}

fn resolve_failure(r: &ResolveError) -> SendError {
    match r {
        ResolveError::Blocked { host, denied } => blocked(Some(host), denied),
        ResolveError::Dns { host, source } => {
            let cause = source.to_string();
            // getaddrinfo's words, without the wrapper's preamble; its "not known" is plainer.
            let cause = cause
                .strip_prefix("failed to lookup address information: ")
                .unwrap_or(&cause);
            let cause = match cause {
                "Name or service not known" => "no such host".to_owned(),
                other => clean(other),
            };
            SendError {
                code: SendErrorCode::DnsFailed,
                message: format!("DNS: cannot resolve {host}: {cause}"),
                may_have_arrived: false,
                answered: None,
            }
        }
        ResolveError::NoAddresses { host } => SendError {
            code: SendErrorCode::DnsFailed,
            message: format!("DNS: {host} has no addresses"),
            may_have_arrived: false,
            answered: None,
        },
    }
}

/// The TLS library's error, also when it travels inside `io::Error`s (whose `source()` skips
/// the error they wrap; the connector wraps it twice).
fn as_tls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current = e;
    loop {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let wrapped: &(dyn std::error::Error + 'static) =
            current.downcast_ref::<std::io::Error>()?.get_ref()?;
        current = wrapped;
    }
}

/// What went wrong in a TLS handshake, in words.
fn tls_cause(e: &rustls::Error, url: &Url) -> String {
    use rustls::{CertificateError, Error};
    match e {
        Error::InvalidMessage(_) | Error::InappropriateMessage { .. } => {
            "the server did not answer with TLS (is it a plain-HTTP port?)".into()
        }
        Error::InvalidCertificate(cert) => match cert {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "certificate has expired".into()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "certificate is not valid yet".into()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!(
                    "certificate is not valid for {}",
                    url.host_str().unwrap_or_default()
                )
            }
            CertificateError::UnknownIssuer => {
                "certificate is signed by an unknown authority".into()
            }
            CertificateError::Revoked => "certificate has been revoked".into(),
            other => format!("invalid certificate ({other:?})"),
        },
        Error::AlertReceived(alert) => format!("the server refused the handshake ({alert:?})"),
        Error::PeerIncompatible(_) => "no TLS version or cipher suite in common".into(),
        other => clean(&other.to_string()),
    }
}

/// `host:port` of a URL, IPv6 in brackets.
pub(super) fn host_port(url: &Url) -> String {
    match url.host() {
        Some(host) => format!("{host}:{}", url.port_or_known_default().unwrap_or(0)),
        None => url.as_str().to_owned(),
    }
}

/// An OS or library message as part of a sentence: no `(os error N)`, lower-case start.
fn clean(text: &str) -> String {
    let text = match text.find(" (os error ") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) if chars.clone().next().is_some_and(char::is_lowercase) => {
            first.to_lowercase().chain(chars).collect()
        }
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_messages_fit_in_a_sentence() {
        assert_eq!(
            clean("Connection refused (os error 111)"),
            "connection refused"
        );
        assert_eq!(clean("Network is unreachable"), "network is unreachable");
        // An acronym keeps its case.
        assert_eq!(clean("TLS error"), "TLS error");
    }

    #[test]
    fn places_are_host_and_port() {
        let url = |s: &str| Url::parse(s).expect("url");
        assert_eq!(host_port(&url("https://127.0.0.1/x")), "127.0.0.1:443");
        assert_eq!(host_port(&url("http://[::1]:8080/")), "[::1]:8080");
        assert_eq!(host_port(&url("http://127.0.0.1/")), "127.0.0.1:80");
    }

    #[test]
    fn blocked_addresses_name_the_rule_and_the_flag() {
        let denied = Denied {
            addr: "10.0.0.7".parse().expect("ip"),
            rule: "private 10.0.0.0/8".into(),
        };
        assert_eq!(
            blocked(Some("hooks.internal.test"), &denied).message,
            "hooks.internal.test resolves to 10.0.0.7, which is blocked (private 10.0.0.0/8); \
             start spoold with --allow-target 10.0.0.7/32 or, for development, \
             --allow-private-targets"
        );
        assert!(blocked(None, &denied)
            .message
            .starts_with("10.0.0.7 is blocked (private 10.0.0.0/8); start spoold"));
    }
}

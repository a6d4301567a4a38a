//! Header-name rules shared by daemon and CLI, so both canonicalise names the same way, and one
//! rule says which headers carry secrets (masked in output, dropped on a cross-origin redirect).

/// Whether `s` is an RFC 9110 token (method names, header names): visible ASCII except
/// separators.
pub fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_token_byte)
}

/// RFC 9110 `tchar`.
pub fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The canonical form of a header name, as Go's `CanonicalMIMEHeaderKey` writes it: the first
/// letter and every letter after `-` upper-case, the rest lower-case (`x-api-KEY` →
/// `X-Api-Key`). A name that is not a token is returned unchanged.
pub fn canonical_name(name: &str) -> String {
    if !is_token(name) {
        return name.to_owned();
    }
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// Whether a header's value is a credential: `Authorization`, `Cookie`, `Proxy-Authorization`,
/// and every name containing `token`, `secret` or `key` (any case). Such values are masked in
/// API output unless revealed, and never follow a redirect to another origin.
pub fn is_secret_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "authorization" | "cookie" | "proxy-authorization"
    ) || ["token", "secret", "key"].iter().any(|w| lower.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names() {
        for (input, want) in [
            ("content-type", "Content-Type"),
            ("x-api-KEY", "X-Api-Key"),
            ("X-SPOOLD-DELIVERY-ID", "X-Spoold-Delivery-Id"),
            ("etag", "Etag"),
            ("bad name", "bad name"),
            ("a--b", "A--B"),
        ] {
            assert_eq!(canonical_name(input), want, "{input}");
        }
    }

    #[test]
    fn secret_headers() {
        for name in [
            "Authorization",
            "cookie",
            "Proxy-Authorization",
            "X-Api-Key",
            "X-Auth-Token",
            "X-Webhook-Secret",
        ] {
            assert!(is_secret_header(name), "{name}");
        }
        for name in ["Content-Type", "X-Event-Type", "Accept"] {
            assert!(!is_secret_header(name), "{name}");
        }
    }

    #[test]
    fn tokens() {
        assert!(is_token("PURGE"));
        assert!(is_token("X-Custom_1.2~"));
        for bad in ["", "GE T", "a/b", "x:y", "é", "{}"] {
            assert!(!is_token(bad), "{bad}");
        }
    }
}

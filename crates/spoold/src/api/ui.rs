//! The dashboard at `/ui` (and `/` redirects there): three static files embedded in the binary
//! (no build step, no Node at run time), served without a token — they hold no data. The page
//! asks the API for everything it shows, with the operator's bearer token in the
//! `Authorization` header (never a cookie, so another site cannot make the browser act with
//! it); a strict content security policy (this origin's scripts only, no inline script) and no
//! framing keep its buttons from being reached any other way.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

const INDEX: &str = include_str!("ui/index.html");
const APP: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/style.css");

/// The paths the dashboard is served under (open, like the health probes), and `/`, which
/// sends a browser to it.
pub const PATHS: [&str; 5] = ["/", "/ui", "/ui/", "/ui/app.js", "/ui/style.css"];

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /`: whoever opens the daemon's address in a browser is sent to the dashboard (303). The
/// `Location` is relative (`ui`), so that it also holds behind a proxy that serves the daemon
/// under a path of its own.
pub async fn root() -> Response {
    Redirect::to("ui").into_response()
}

pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

pub async fn app() -> Response {
    asset("text/javascript; charset=utf-8", APP)
}

pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

#[cfg(test)]
mod tests {
    use super::{APP, INDEX, STYLE};

    /// The content security policy allows no inline style: a table's column widths are classes
    /// (`col.w30`), and each one `app.js` names has its rule in `style.css`.
    #[test]
    fn every_column_width_has_its_rule_and_nothing_is_styled_inline() {
        let column = regex::Regex::new(r#"\["[^"\]]*", (\d+)(?:, true)?\]"#).expect("regex");
        let widths: Vec<&str> = column
            .captures_iter(APP)
            .filter_map(|c| c.get(1))
            .map(|m| m.as_str())
            .collect();
        assert!(widths.len() > 20, "{widths:?}");
        for w in widths {
            assert!(
                STYLE.contains(&format!("col.w{w} {{ width: {w}%; }}")),
                "style.css has no rule for col.w{w}"
            );
        }
        for (file, text) in [("index.html", INDEX), ("app.js", APP)] {
            assert!(!text.contains("style="), "{file} styles inline");
        }
    }
}

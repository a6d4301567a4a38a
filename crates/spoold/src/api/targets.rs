//! `GET /v1/targets`: one row per target (`scheme://host:port`) that has work waiting or in
//! flight, failed in the last hour, is paused or has a URL that answered 410 Gone — the store's
//! counts joined with what the scheduler knows of each target's health. And the operator's
//! pause and resume of a target, or the resume of one gone URL.

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use spool_proto::units::format_time;
use spool_proto::{ErrorCode, GoneUrlView, TargetList, TargetPause, TargetView};

use super::{first_values, json, page_limit, ApiError, SharedState};
use crate::deliveries::activity::TargetActivity;

#[utoipa::path(get, path = "/v1/targets", tag = "overview",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1–500 (default 100)"),
        ("cursor" = Option<String>, Query, pattern = "^(https?://.*)?$", description = "`nextCursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "Targets in origin order", body = TargetList),
        (status = 400, description = "`invalid_limit` or `invalid_cursor`", body = spool_proto::ErrorBody),
    ))]
pub async fn targets(
    State(state): State<SharedState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = first_values(query.as_deref());
    let limit = page_limit(&params)?;
    let after = match params.get("cursor").map(String::as_str) {
        None | Some("") => None,
        Some(c) if c.starts_with("http://") || c.starts_with("https://") => Some(c.to_owned()),
        Some(_) => {
            return Err(ApiError::new(
                ErrorCode::InvalidCursor,
                "cursor must be the nextCursor of a previous page",
            ))
        }
    };
    let now = state.store.now_ms();
    // One more than a page from each source: whatever sorts first among them is the page
    // (an origin the store did not return sorts after all it did).
    let counted = state.store.origins(limit + 1, after.clone()).await?;
    let mut rows: BTreeMap<String, (u64, u64, TargetActivity)> = counted
        .into_iter()
        .map(|o| {
            (
                o.origin,
                (o.pending, o.in_flight, TargetActivity::default()),
            )
        })
        .collect();
    let gone = gone_urls(&state).await;
    for origin in gone.keys() {
        if after.as_ref().is_none_or(|a| origin > a) {
            rows.entry(origin.clone())
                .or_insert((0, 0, TargetActivity::default()));
        }
    }
    let active = state.activity.targets(now);
    for (origin, activity) in active
        .into_iter()
        .filter(|(o, _)| after.as_ref().is_none_or(|a| o > a))
    {
        let shown = activity.failed_attempts_last_hour > 0
            || activity.paused_until.is_some()
            || activity.pause_reason.is_some()
            || rows.contains_key(&origin);
        if shown {
            rows.entry(origin)
                .or_insert((0, 0, TargetActivity::default()))
                .2 = activity;
        }
    }
    let more = rows.len() > limit as usize;
    let targets: Vec<TargetView> = rows
        .into_iter()
        .take(limit as usize)
        .map(|(origin, (pending, in_flight, a))| TargetView {
            pending,
            in_flight,
            failed_last_hour: a.failed_last_hour,
            failed_attempts_last_hour: a.failed_attempts_last_hour,
            last_failure_at: a.last_failure_at.map(format_time),
            connect_failures: a.connect_failures,
            paused: a.paused_until.is_some() || a.pause_reason.is_some(),
            paused_until: a.paused_until.map(format_time),
            pause_reason: a.pause_reason.map(|r| r.as_str().to_owned()),
            last_error_code: a.last_error_code,
            last_success_at: a.last_success_at.map(format_time),
            gone_urls: gone.get(&origin).cloned().unwrap_or_default(),
            origin,
        })
        .collect();
    let next_cursor = more
        .then(|| targets.last().map(|t| t.origin.clone()))
        .flatten();
    Ok(json(
        StatusCode::OK,
        &TargetList {
            targets,
            next_cursor,
        },
    ))
}

#[utoipa::path(post, path = "/v1/targets/{origin}/pause", tag = "overview",
    params(("origin" = String, Path, pattern = "^https?://(([A-Za-z0-9-]+\\.)*[A-Za-z][A-Za-z0-9-]*|(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3})(:([0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?(/.*)?$", description = "The target: a URL or its origin, percent-encoded (`https%3A%2F%2Fhooks.example.com`); a host name or an IPv4 address")),
    responses(
        (status = 200, description = "Paused: nothing is sent to its origin (on this host; a path given is ignored) until it is resumed; its deliveries wait, uncharged", body = TargetPause),
        (status = 400, description = "`invalid_request`: not an http(s) URL", body = spool_proto::ErrorBody),
    ))]
pub async fn pause(
    State(state): State<SharedState>,
    Path(origin): Path<String>,
) -> Result<Response, ApiError> {
    set_paused(&state, &origin, true).await
}

#[utoipa::path(post, path = "/v1/targets/{origin}/resume", tag = "overview",
    params(("origin" = String, Path, pattern = "^https?://(([A-Za-z0-9-]+\\.)*[A-Za-z][A-Za-z0-9-]*|(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3})(:([0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?(/.*)?$", description = "The target: a URL or its origin, percent-encoded; a host name or an IPv4 address")),
    responses(
        (status = 200, description = "Resumed. An origin: an operator's pause is lifted, and so is whatever else held it back (an open breaker, a connection pause, its URLs that answered 410 Gone). A URL with a path: only that URL's 410 is lifted (its deliveries with any query are due again; the first 410 after this fails its delivery)", body = TargetPause),
        (status = 400, description = "`invalid_request`: not an http(s) URL", body = spool_proto::ErrorBody),
    ))]
pub async fn resume(
    State(state): State<SharedState>,
    Path(origin): Path<String>,
) -> Result<Response, ApiError> {
    set_paused(&state, &origin, false).await
}

/// The gone URLs by origin: those this daemon knows of, and those whose deliveries another
/// host parked (PostgreSQL) — from the store, so every host lists the same.
async fn gone_urls(state: &SharedState) -> BTreeMap<String, Vec<GoneUrlView>> {
    match state.store.parked_urls(10_000).await {
        Ok(urls) => {
            let now = state.store.now_ms();
            for url in urls {
                if let Some(origin) = crate::deliveries::submission::origin_filter(&url) {
                    state.gone.found(&url, &origin, now);
                }
            }
            state.metrics.observe_gone(state.gone.by_origin());
        }
        Err(e) => tracing::warn!(error = %e, "could not read the URLs parked deliveries wait for"),
    }
    let mut by_origin: BTreeMap<String, Vec<GoneUrlView>> = BTreeMap::new();
    for (url, g) in state.gone.list() {
        by_origin.entry(g.origin).or_default().push(GoneUrlView {
            url,
            since: format_time(g.since),
        });
    }
    by_origin
}

/// An operator's pause (`paused`) or resume of the target `named`. A pause holds the whole
/// origin. A resume of an origin lifts its pause and everything else that holds it back,
/// its gone URLs included; a resume of a URL (a path given) lifts that URL's 410 only.
async fn set_paused(state: &SharedState, named: &str, paused: bool) -> Result<Response, ApiError> {
    let target = target(named)?;
    let origin = target.origin.clone();
    if paused {
        state.control.pause(&origin);
        tracing::info!(target_origin = %origin, "target paused by an operator");
        return Ok(json(
            StatusCode::OK,
            &TargetPause {
                origin,
                paused,
                url: None,
                resumed_urls: Vec::new(),
                unparked: None,
            },
        ));
    }
    let (was_gone, mut resumed_urls) = match &target.url {
        Some(url) => (state.gone.resume_url(url), vec![url.clone()]),
        None => {
            state.control.resume(&origin);
            (true, state.gone.resume_origin(&origin))
        }
    };
    // The store's parked deliveries are due again, also those another host parked.
    let unparked = state
        .store
        .unpark(origin.clone(), target.url.clone())
        .await?;
    state.metrics.observe_gone(state.gone.by_origin());
    tracing::info!(target_origin = %origin, unparked, urls = resumed_urls.len(),
                   "resumed by an operator");
    if !was_gone && unparked == 0 {
        resumed_urls.clear();
    }
    Ok(json(
        StatusCode::OK,
        &TargetPause {
            paused: state.control.is_paused(&origin),
            origin,
            url: target.url,
            resumed_urls,
            unparked: Some(unparked),
        },
    ))
}

/// What a target named in a path must look like: an http(s) URL whose host is a name (its
/// last label starting with a letter, so that no other IPv4 spelling hides in it) or a dotted
/// IPv4 address, an optional port, an optional path. The OpenAPI document says the same (checked by a test), so the API takes
/// exactly what its document calls valid.
pub const TARGET_PATTERN: &str = "^https?://(([A-Za-z0-9-]+\\.)*[A-Za-z][A-Za-z0-9-]*|(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3})(:([0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?(/.*)?$";

/// A target as named in a path or a filter: an origin, or a URL of it (see
/// [`crate::deliveries::submission::TargetFilter`]).
pub(crate) fn target(text: &str) -> Result<crate::deliveries::submission::TargetFilter, ApiError> {
    static PATTERN: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| regex::Regex::new(TARGET_PATTERN).ok());
    let fits = PATTERN.as_ref().is_some_and(|p| p.is_match(text));
    fits.then(|| crate::deliveries::submission::target_filter(text))
        .flatten()
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "target {text:?} is not an http:// or https:// URL with a host name or \
                     IPv4 address (e.g. https://hooks.example.com)"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_says_what_the_api_takes() {
        let doc: serde_json::Value =
            serde_json::from_str(crate::api::openapi::DOCUMENT).expect("JSON");
        for action in ["pause", "resume"] {
            let param =
                &doc["paths"][format!("/v1/targets/{{origin}}/{action}")]["post"]["parameters"][0];
            assert_eq!(param["schema"]["pattern"], TARGET_PATTERN, "{param}");
        }
        let taken = [
            "https://hooks.example.com",
            "http://localhost:9000/x?y=1",
            "http://a-b.c:65535",
            "http://127.0.0.1:8080",
        ];
        for ok in taken {
            assert!(target(ok).is_ok(), "{ok}");
        }
        let refused = [
            "0",
            "ftp://a",
            "http://1.2.3",
            "http://01.2.3.4",
            "http://256.0.0.1",
            "http://a:65536",
            "HTTP://a",
            "http://a..b",
        ];
        for bad in refused {
            assert!(target(bad).is_err(), "{bad}");
        }
    }
}

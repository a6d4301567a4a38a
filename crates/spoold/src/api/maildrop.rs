//! The maildrop's pickup, through the API's own create path ([`super::deliveries::admit`]), and
//! `GET /v1/maildrop`: where the maildrop is, how many drops wait, and the drops the daemon
//! refused, with why — so that the author of a job whose `spoolctl send` dropped a request
//! finds out when it was refused. The files themselves: [`crate::maildrop`].

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use spool_proto::maildrop::MaildropView;
use spool_proto::ErrorCode;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{json, ApiError, AppState, SharedState};
use crate::maildrop::{Maildrop, SCAN_EVERY};

/// What one pickup pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    pub picked_up: u64,
    pub refused: u64,
    /// The store could not take a create now: the rest waits for the next pass.
    pub stopped: bool,
}

/// What became of one drop.
enum Taken {
    Done,
    Refused,
    /// The store could not take it now.
    Later,
}

/// Pick up `maildrop` until `stop`: a pass now, then on each change and every [`SCAN_EVERY`].
pub async fn run(maildrop: Maildrop, state: Arc<AppState>, stop: CancellationToken) {
    let changed = Arc::new(Notify::new());
    let watch = crate::maildrop::watch_changes(&maildrop.dir, Arc::clone(&changed), stop.clone());
    loop {
        let pass = pass(&maildrop, &state).await;
        if pass.picked_up + pass.refused > 0 {
            info!(
                picked_up = pass.picked_up,
                refused = pass.refused,
                "maildrop pass"
            );
        }
        let wait = if pass.stopped {
            Duration::from_secs(1)
        } else {
            SCAN_EVERY
        };
        tokio::select! {
            () = stop.cancelled() => break,
            () = changed.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
    if let Some(watch) = watch {
        let _ = tokio::task::spawn_blocking(move || watch.join()).await;
    }
}

/// Take in every drop waiting, oldest first.
pub async fn pass(maildrop: &Maildrop, state: &AppState) -> Pass {
    let mut pass = Pass::default();
    let (drops, others) = match maildrop.entries() {
        Ok(found) => found,
        Err(e) => {
            warn!(dir = %maildrop.dir.display(), error = %e, "cannot read the maildrop");
            pass.stopped = true;
            return pass;
        }
    };
    for name in others {
        maildrop.refuse(
            &state.metrics,
            state.store.now_ms(),
            &name,
            "bad_name",
            "not a drop's name (32 hex digits and .drop)",
        );
        pass.refused += 1;
    }
    for name in drops {
        match take(maildrop, state, &name).await {
            Taken::Done => pass.picked_up += 1,
            Taken::Refused => pass.refused += 1,
            Taken::Later => {
                pass.stopped = true;
                break;
            }
        }
    }
    state
        .metrics
        .maildrop_waiting
        .set(maildrop.waiting() as i64);
    pass
}

/// Take in one drop.
async fn take(maildrop: &Maildrop, state: &AppState, name: &str) -> Taken {
    let path = maildrop.dir.join(name);
    let refuse = |code: &str, why: &str| {
        maildrop.refuse(&state.metrics, state.store.now_ms(), name, code, why);
        Taken::Refused
    };
    let drop = match crate::maildrop::read_drop(&path, name) {
        Ok(Some(drop)) => drop,
        // Gone meanwhile (removed by hand).
        Ok(None) => return Taken::Done,
        Err((code, why)) => return refuse(code, &why),
    };
    // Already made — by an earlier pickup that died before it removed the file, or by the
    // create this drop stands for, which the daemon did store after all?
    match state.store.get(drop.id.clone()).await {
        Ok(Some(_)) => {
            maildrop.remove(&path);
            return Taken::Done;
        }
        Ok(None) => {}
        Err(e) => {
            warn!(drop = name, error = %e, "cannot pick up a drop now; it waits");
            return Taken::Later;
        }
    }
    let bytes = drop.request.get().as_bytes();
    match super::deliveries::admit(state, bytes, Some(drop.id.clone())).await {
        Ok((_, delivery)) => {
            state.metrics.maildrop_picked_up.inc();
            info!(drop = name, delivery_id = %delivery.id, target_origin = %delivery.origin,
                  dropped_at = %drop.dropped_at, "picked up a drop from the maildrop");
            maildrop.remove(&path);
            Taken::Done
        }
        Err(e) if retried_later(e.code) => {
            warn!(drop = name, code = e.code.as_str(), error = %e.message,
                  "cannot pick up a drop now; it waits");
            Taken::Later
        }
        Err(e) => refuse(e.code.as_str(), &e.message),
    }
}

/// Errors after which a drop waits rather than being refused: the store, not the drop.
fn retried_later(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::StorageUnavailable
            | ErrorCode::StorageFull
            | ErrorCode::JournalFull
            | ErrorCode::PersistenceFailed
            | ErrorCode::ShuttingDown
    )
}

/// Refused drops listed at most.
const LISTED: usize = 100;

#[utoipa::path(get, path = "/v1/maildrop", tag = "overview",
    responses(
        (status = 200, description = "The maildrop: its path, the drops waiting, and the refused ones (newest first, at most 100) with why", body = MaildropView),
        (status = 404, description = "`not_found`: the daemon runs with `--maildrop off`", body = spool_proto::ErrorBody),
    ))]
pub async fn maildrop(State(state): State<SharedState>) -> Result<Response, ApiError> {
    let Some(drop) = state.maildrop.clone() else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            "this daemon picks up no maildrop (--maildrop off)",
        ));
    };
    let view = tokio::task::spawn_blocking(move || MaildropView {
        path: drop.dir.display().to_string(),
        waiting: drop.waiting(),
        refused: drop.refused(LISTED),
    })
    .await
    .map_err(|e| {
        ApiError::new(
            ErrorCode::InternalError,
            format!("reading the maildrop: {e}"),
        )
    })?;
    Ok(json(StatusCode::OK, &view))
}

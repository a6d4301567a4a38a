//! The maildrop's file format: a create request written by `spoolctl send` when the daemon
//! cannot be reached, picked up by the daemon when it runs (as Postfix's `postdrop` and
//! `pickup` do for mail). One drop is one file, `<id>.drop` in the maildrop directory, holding
//! one JSON object: the format version, the drop's id (the id its delivery will have: a
//! pickup that is repeated after a crash finds the delivery it already made, with or without
//! an idempotency key), when it was dropped, and the create request exactly as the API takes it
//! (`POST /v1/deliveries`). A file being written has a name that starts with `.` and is never
//! picked up; it is renamed into place only once it is whole and on disk.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The version of the format this build writes and reads. A drop of another version is
/// refused (moved aside), never guessed at.
pub const DROP_VERSION: u32 = 1;

/// The largest drop file taken: the largest create request, base64 bodies included, and room
/// for the wrapping.
pub const MAX_DROP_BYTES: u64 = crate::MAX_REQUEST_BYTES as u64 + 64 * 1024;

/// The suffix of a drop's file name.
pub const DROP_SUFFIX: &str = ".drop";

/// Where refused drops are moved, inside the maildrop, each with a `<id>.reason` file beside it.
pub const REFUSED_DIR: &str = "refused";

/// One drop.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Drop {
    /// [`DROP_VERSION`].
    pub spoold_drop: u32,
    /// 32 lower-case hex digits (a UUIDv7: drops sort in the order they were made), also its
    /// file name and the id of the delivery it becomes.
    pub id: String,
    /// RFC 3339, when it was written.
    pub dropped_at: String,
    /// The create request, as the API takes it.
    pub request: Box<RawValue>,
}

/// Why a drop was refused, as the `<id>.reason` file beside it and the API say.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefusedDrop {
    /// The drop's file name.
    pub name: String,
    /// A stable code: an API error code (`invalid_request`, `target_blocked`,
    /// `idempotency_conflict`, …) or one of the maildrop's own (`not_a_file`, `too_large`,
    /// `unreadable`, `malformed`, `unknown_version`, `bad_name`).
    pub code: String,
    pub message: String,
    /// RFC 3339, when it was refused.
    pub refused_at: String,
}

/// `GET /v1/maildrop`: where the maildrop is and what it holds.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaildropView {
    /// Its directory, on the daemon's host.
    pub path: String,
    /// Drops waiting to be picked up.
    pub waiting: u64,
    /// Refused drops, newest first (at most 100).
    pub refused: Vec<RefusedDrop>,
}

/// Where a daemon's API listens, as the name of the file in which it says where its maildrop
/// is: in `$XDG_STATE_HOME/spoold/` (`~/.local/state/spoold/`) of the user it runs as, written
/// at each start, so that `spoolctl` run by that user from anywhere (cron's working directory
/// is the home directory; the daemon may have been started elsewhere) finds the maildrop of
/// the daemon it talks to. A TCP listener is named by its port (a local daemon is one per
/// port, whichever address it was asked for), a unix socket by its path.
pub fn pointer_name(listen: PointerOf<'_>) -> String {
    match listen {
        PointerOf::Port(port) => format!("maildrop-port-{port}"),
        PointerOf::Socket(path) => {
            let safe: String = path
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            format!("maildrop-socket{safe}")
        }
    }
}

/// Where the pointer file of the daemon at `listen` is for a user whose `XDG_STATE_HOME` and
/// `HOME` are `xdg` and `home` (as the environment has them): `$XDG_STATE_HOME/spoold/`, else
/// `$HOME/.local/state/spoold/`; `None` without an absolute one of them.
pub fn pointer_path(
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
    listen: PointerOf<'_>,
) -> Option<std::path::PathBuf> {
    use std::path::{Path, PathBuf};
    let state = xdg
        .filter(|d| Path::new(d).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            home.filter(|h| Path::new(h).is_absolute())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })?;
    Some(state.join("spoold").join(pointer_name(listen)))
}

/// See [`pointer_name`].
#[derive(Debug, Clone, Copy)]
pub enum PointerOf<'a> {
    Port(u16),
    Socket(&'a str),
}

/// Whether `name` is a drop's file name: 32 lower-case hex digits and [`DROP_SUFFIX`].
pub fn drop_id(name: &str) -> Option<&str> {
    let id = name.strip_suffix(DROP_SUFFIX)?;
    (id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_are_named_by_port_or_socket() {
        assert_eq!(pointer_name(PointerOf::Port(8080)), "maildrop-port-8080");
        assert_eq!(
            pointer_name(PointerOf::Socket("/run/spoold/api.sock")),
            "maildrop-socket_run_spoold_api.sock"
        );
    }

    #[test]
    fn drop_names() {
        let id = "0193b0e2c4f87c1d9a3b5e6f70819203";
        assert_eq!(drop_id(&format!("{id}.drop")), Some(id));
        for bad in [
            id.to_owned(),
            format!(".{id}.drop"),
            format!("{}.drop", id.to_uppercase()),
            format!("{}x.drop", &id[..31]),
            "refused".to_owned(),
        ] {
            assert_eq!(drop_id(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_drop_keeps_its_request_byte_for_byte() {
        let text = r#"{"spooldDrop":1,"id":"0193b0e2c4f87c1d9a3b5e6f70819203","droppedAt":"2026-12-07T23:00:00Z","request":{"targetUrl":"http://127.0.0.1:9/x", "body": {"a":  1}}}"#;
        let d: Drop = serde_json::from_str(text).expect("a drop");
        assert_eq!(
            d.request.get(),
            r#"{"targetUrl":"http://127.0.0.1:9/x", "body": {"a":  1}}"#
        );
        assert!(serde_json::from_str::<Drop>(&text.replace("\"id\"", "\"other\"")).is_err());
    }
}

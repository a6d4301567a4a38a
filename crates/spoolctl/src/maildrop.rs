//! Dropping a create into the daemon's maildrop when the daemon cannot be reached
//! ([`spool_proto::maildrop`]; the book's "The maildrop"): where the maildrop is, and writing a
//! drop durably — whole under a temporary name, fsynced, renamed into place, the directory
//! fsynced — before `send` says it is dropped.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use spool_proto::maildrop::{PointerOf, DROP_SUFFIX, DROP_VERSION, MAX_DROP_BYTES};

/// The Debian package's system service keeps its maildrop here.
pub const SYSTEM_MAILDROP: &str = "/var/lib/spoold/maildrop";

/// Where the maildrop was found, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub dir: PathBuf,
}

/// The maildrop to drop into: `explicit` (`--maildrop` or `SPOOLD_MAILDROP`) if given; else
/// the one the daemon listening at `listen` said it has (its pointer file in this user's
/// `$XDG_STATE_HOME/spoold/`); else the system service's. Only a directory this user may
/// write into is taken. `Err`: why there is none, for the message.
pub fn find(explicit: Option<&Path>, listen: Option<PointerOf<'_>>) -> Result<Found, String> {
    if let Some(dir) = explicit {
        if dir.as_os_str() == "off" {
            return Err("--maildrop off (SPOOLD_MAILDROP=off)".to_owned());
        }
        return usable(dir).map(|()| Found {
            dir: dir.to_path_buf(),
        });
    }
    let mut tried = Vec::new();
    let pointer = listen.and_then(|listen| {
        spool_proto::maildrop::pointer_path(
            std::env::var_os("XDG_STATE_HOME"),
            std::env::var_os("HOME"),
            listen,
        )
    });
    if let Some(pointer) = pointer {
        match std::fs::read_to_string(&pointer) {
            Ok(text) => {
                let dir = PathBuf::from(text.trim_end_matches('\n'));
                match usable(&dir) {
                    Ok(()) => return Ok(Found { dir }),
                    Err(why) => tried.push(why),
                }
            }
            Err(_) => tried.push(format!("{} does not say where", pointer.display())),
        }
    }
    match usable(Path::new(SYSTEM_MAILDROP)) {
        Ok(()) => Ok(Found {
            dir: PathBuf::from(SYSTEM_MAILDROP),
        }),
        Err(why) => {
            tried.push(why);
            Err(tried.join("; "))
        }
    }
}

/// Whether this user may drop into `dir`: a directory (not a link to one) it may write and
/// enter.
fn usable(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    rustix::fs::access(
        dir,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .map_err(|e| format!("{}: {e}", dir.display()))
}

/// Write the create `request` (its JSON, as the API takes it) as drop `id` into `dir`, durably.
/// The drop's path.
pub fn write(dir: &Path, id: &str, dropped_at: &str, request: &[u8]) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let request: &serde_json::value::RawValue = serde_json::from_slice(request)
        .map_err(|e| std::io::Error::other(format!("the request is not JSON: {e}")))?;
    let text = serde_json::to_vec(&serde_json::json!({
        "spooldDrop": DROP_VERSION,
        "id": id,
        "droppedAt": dropped_at,
        "request": request,
    }))
    .map_err(std::io::Error::other)?;
    if text.len() as u64 > MAX_DROP_BYTES {
        return Err(std::io::Error::other(format!(
            "the request is too large to drop ({} bytes, at most {MAX_DROP_BYTES})",
            text.len()
        )));
    }
    let temp = dir.join(format!(".{id}.{}", std::process::id()));
    let done = dir.join(format!("{id}{DROP_SUFFIX}"));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&temp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, &done)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if let Err(e) = written {
        // Nothing half-written is left to be picked up (a drop is whole or not there).
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_is_whole_and_named_by_its_id() {
        let dir = std::env::temp_dir().join(format!("spoolctl-maildrop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let id = "0193b0e2c4f87c1d9a3b5e6f70819203";
        let path = write(
            &dir,
            id,
            "2026-12-07T23:00:00Z",
            br#"{"targetUrl":"http://127.0.0.1:9/"}"#,
        )
        .expect("written");
        assert_eq!(path, dir.join(format!("{id}.drop")));
        let drop: spool_proto::maildrop::Drop =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("a drop");
        assert_eq!(
            (drop.id.as_str(), drop.request.get()),
            (id, r#"{"targetUrl":"http://127.0.0.1:9/"}"#)
        );
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
        assert!(find(Some(&dir), None).is_ok());
        assert!(find(Some(&dir.join("nope")), None).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

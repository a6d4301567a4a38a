//! The maildrop: its files. (Its pickup, which goes through the API's create path, is
//! [`crate::api::maildrop`].) When `spoolctl send` cannot reach the daemon it writes the create
//! request into the maildrop (`<data-dir>/maildrop` unless `--maildrop` says otherwise) as one
//! file, whole and on disk before it exits 0 ([`spool_proto::maildrop`]); this takes each one
//! in — at start, on a change notification (inotify), and every [`SCAN_EVERY`] as the backstop —
//! oldest first, through the API's own create path ([`crate::api::deliveries::admit`]:
//! validation, the address policy, idempotency keys, the group commit). A drop's file is
//! removed only once its create is durable; the delivery gets the drop's id, so a pickup
//! repeated after a crash finds the delivery it made and only removes the file: nothing is lost
//! and nothing is created twice, with or without an idempotency key.
//!
//! A drop the daemon will not take is moved aside into `refused/` with a `<name>.reason`
//! beside it, logged and counted, and the drops after it go on. Nothing in a drop is trusted:
//! a name that is not a drop's, a symbolic link, a FIFO, a directory, a file with other links,
//! one larger than [`MAX_DROP_BYTES`] or that grows while it is read is refused without being
//! followed, blocked on or read past the limit. A store that cannot take a create now (out of
//! reach, full) stops the pass: the drop stays and is tried again.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use spool_proto::maildrop::{self, Drop, RefusedDrop, DROP_VERSION, MAX_DROP_BYTES};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How often the maildrop is looked at when no change was notified.
pub const SCAN_EVERY: Duration = Duration::from_secs(5);

/// A file being written whose writer died is removed after this long.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// The maildrop of one daemon.
#[derive(Debug, Clone)]
pub struct Maildrop {
    pub dir: PathBuf,
}

impl Maildrop {
    /// Make the maildrop (and its `refused/`) if it is not there. Its mode is set only when
    /// it is made here: an administrator's (a group's `3730`, see the book) is kept.
    pub fn prepare(&self) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt as _;
        if !self.dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)?;
        }
        let refused = self.dir.join(maildrop::REFUSED_DIR);
        if !refused.exists() {
            std::fs::DirBuilder::new().mode(0o700).create(&refused)?;
        }
        Ok(())
    }

    /// Drops waiting, oldest first, and the other entries (not drops, not being written).
    pub(crate) fn entries(&self) -> std::io::Result<(Vec<String>, Vec<String>)> {
        let mut drops = Vec::new();
        let mut others = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                // Not UTF-8: not a drop's name; refused by the raw name below.
                others.push(entry.file_name().to_string_lossy().into_owned());
                continue;
            };
            if name == maildrop::REFUSED_DIR {
                continue;
            }
            if name.starts_with('.') {
                self.remove_if_stale(&entry.path());
                continue;
            }
            if maildrop::drop_id(&name).is_some() {
                drops.push(name);
            } else {
                others.push(name);
            }
        }
        drops.sort();
        Ok((drops, others))
    }

    /// A file a writer is still writing (or died writing): removed once it is an hour old.
    fn remove_if_stale(&self, path: &Path) {
        let old = std::fs::symlink_metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_TEMP);
        if old {
            let _ = std::fs::remove_file(path);
        }
    }

    /// How many drops wait now.
    pub fn waiting(&self) -> u64 {
        self.entries().map_or(0, |(drops, _)| drops.len() as u64)
    }

    /// Remove a drop whose create is durable.
    pub(crate) fn remove(&self, path: &Path) {
        if let Err(e) = std::fs::remove_file(path) {
            warn!(path = %path.display(), error = %e,
                  "cannot remove a drop that was picked up (its delivery is made; it is skipped \
                   when seen again)");
        }
    }

    /// Move `name` aside into `refused/`, with why beside it.
    pub(crate) fn refuse(
        &self,
        metrics: &crate::metrics::Metrics,
        now: spool_store::model::Millis,
        name: &str,
        code: &str,
        why: &str,
    ) {
        let refused = self.dir.join(maildrop::REFUSED_DIR);
        let reason = RefusedDrop {
            name: name.to_owned(),
            code: code.to_owned(),
            message: why.to_owned(),
            refused_at: spool_proto::units::format_time(now),
        };
        warn!(
            drop = name,
            code, why, "refused a drop from the maildrop (moved to refused/)"
        );
        metrics
            .maildrop_refused
            .get_or_create(&crate::metrics::CodeLabel {
                code: code.to_owned(),
            })
            .inc();
        if let Err(e) = std::fs::rename(self.dir.join(name), refused.join(name)) {
            warn!(drop = name, error = %e, "cannot move a refused drop aside; removing it");
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        let text = serde_json::to_vec_pretty(&reason).unwrap_or_default();
        if let Err(e) =
            spool_store::durable_file::write(&refused.join(format!("{name}.reason")), &text)
        {
            warn!(drop = name, error = %e, "cannot write why a drop was refused");
        }
    }

    /// The refused drops, newest first, at most `limit`.
    pub fn refused(&self, limit: usize) -> Vec<RefusedDrop> {
        let dir = self.dir.join(maildrop::REFUSED_DIR);
        let mut found: Vec<RefusedDrop> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".reason"))
            .filter_map(|e| {
                let mut text = Vec::new();
                std::fs::File::open(e.path())
                    .ok()?
                    .take(64 * 1024)
                    .read_to_end(&mut text)
                    .ok()?;
                serde_json::from_slice(&text).ok()
            })
            .collect();
        found.sort_by(|a: &RefusedDrop, b| b.refused_at.cmp(&a.refused_at));
        found.truncate(limit);
        found
    }
}

/// Say where the maildrop of the daemon listening at `bound` is, for `spoolctl` run by the
/// same user ([`spool_proto::maildrop::pointer_name`]): in `$XDG_STATE_HOME/spoold/`, else
/// `$HOME/.local/state/spoold/`; nothing without either. Only the `spoold` program does this
/// (a daemon run inside a test writes nothing outside its directories).
pub fn point_to(dir: &Path, bound: &crate::Bound) {
    use spool_proto::maildrop::{pointer_path, PointerOf};
    let socket;
    let listen = match bound {
        crate::Bound::Tcp(addr) => PointerOf::Port(addr.port()),
        crate::Bound::Unix(path) => {
            socket = path.display().to_string();
            PointerOf::Socket(&socket)
        }
    };
    let Some(file) = pointer_path(
        std::env::var_os("XDG_STATE_HOME"),
        std::env::var_os("HOME"),
        listen,
    ) else {
        return;
    };
    let text = format!("{}\n", dir.display());
    if let Err(e) = spool_store::durable_file::write(&file, text.as_bytes()) {
        warn!(file = %file.display(), error = %e,
              "cannot say where the maildrop is (spoolctl then needs --maildrop)");
    }
}

/// Read a drop without trusting it: not following a link, not blocking on a FIFO, not reading
/// past [`MAX_DROP_BYTES`]. `Ok(None)`: it is gone. `Err((code, why))`: refused.
pub(crate) fn read_drop(path: &Path, name: &str) -> Result<Option<Drop>, (&'static str, String)> {
    use rustix::fs::{Mode, OFlags};
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(("not_a_file", "a symbolic link, not followed".into()))
        }
        Err(e) => return Err(("unreadable", format!("cannot open it: {e}"))),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| ("unreadable", format!("fstat: {e}")))?;
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    if kind != rustix::fs::FileType::RegularFile {
        return Err(("not_a_file", format!("not a regular file ({kind:?})")));
    }
    if st.st_nlink != 1 {
        return Err((
            "not_a_file",
            format!(
                "a file with {} links: a drop has one (a hard link to another file is not \
                 taken)",
                st.st_nlink
            ),
        ));
    }
    let size = st.st_size as u64;
    if size > MAX_DROP_BYTES {
        return Err((
            "too_large",
            format!("{size} bytes, over the {MAX_DROP_BYTES} a drop may have"),
        ));
    }
    let mut text = Vec::with_capacity(size as usize);
    std::fs::File::from(fd)
        .take(MAX_DROP_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| ("unreadable", format!("cannot read it: {e}")))?;
    if text.len() as u64 != size {
        return Err((
            "unreadable",
            format!(
                "it changed while it was read ({size} bytes, then {})",
                text.len()
            ),
        ));
    }
    let drop: Drop = serde_json::from_slice(&text).map_err(|e| {
        let code = if e.is_eof() { "truncated" } else { "malformed" };
        (code, format!("not a drop: {e}"))
    })?;
    if drop.spoold_drop != DROP_VERSION {
        return Err((
            "unknown_version",
            format!(
                "format version {} (this daemon reads {DROP_VERSION})",
                drop.spoold_drop
            ),
        ));
    }
    if maildrop::drop_id(name) != Some(drop.id.as_str()) {
        return Err(("malformed", format!("its id {:?} is not its name", drop.id)));
    }
    Ok(Some(drop))
}

/// Wake `changed` when a file is moved or written into `dir` (inotify), on a thread of its own
/// until `stop`. `None` where inotify is not to be had: the periodic scan does alone.
pub(crate) fn watch_changes(
    dir: &Path,
    changed: Arc<Notify>,
    stop: CancellationToken,
) -> Option<std::thread::JoinHandle<()>> {
    use rustix::fs::inotify;
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
    inotify::add_watch(
        &fd,
        dir,
        inotify::WatchFlags::MOVED_TO | inotify::WatchFlags::CLOSE_WRITE,
    )
    .ok()?;
    std::thread::Builder::new()
        .name("maildrop-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            while !stop.is_cancelled() {
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                let half = rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: 500_000_000,
                };
                if matches!(rustix::event::poll(&mut fds, Some(&half)), Ok(n) if n > 0) {
                    while matches!(rustix::io::read(&fd, &mut buf), Ok(n) if n > 0) {}
                    changed.notify_one();
                }
            }
        })
        .ok()
}

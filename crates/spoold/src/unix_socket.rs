//! Binding the control API's unix socket. The socket is owner-only from the first instant: it is
//! created under a restrictive umask rather than chmod-ed afterwards, so there is no window in
//! which another user could connect.

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::Path;

use rustix::fs::Mode;

/// Bind `path`, replacing a stale socket nobody answers on; refuse if a live daemon owns it, or
/// if anything but a socket is there (a file is never deleted to make room).
pub fn bind(path: &Path) -> Result<tokio::net::UnixListener, String> {
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create socket directory {}: {e}", dir.display()))?;
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!(
                "{} exists and is not a socket; refusing to replace it (remove it, or choose \
                 another --unix-socket path)",
                path.display()
            ));
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(format!(
                    "unix socket {} is in use by a running process",
                    path.display()
                ))
            }
            Err(_) => std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove stale socket {}: {e}", path.display()))?,
        }
    }
    // umask is process-wide; this runs once at start-up, before any other file is created.
    let previous = rustix::process::umask(Mode::from_raw_mode(0o177));
    let bound = std::os::unix::net::UnixListener::bind(path);
    rustix::process::umask(previous);
    let listener = bound.map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot configure socket {}: {e}", path.display()))?;
    tokio::net::UnixListener::from_std(listener)
        .map_err(|e| format!("cannot register socket {}: {e}", path.display()))
}

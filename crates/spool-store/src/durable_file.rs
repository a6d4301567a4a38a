//! A small file written so that a crash leaves either the old one or the new one whole: for
//! what a host keeps beside its database (the PostgreSQL fence, results waiting for the
//! database).

use std::io::Write;
use std::path::Path;

/// Write `bytes` as `path` (owner-only): to a temporary name beside it, fsynced, renamed into
/// place, the directory fsynced. The directory is created (owner-only) if it is not there.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy().into_owned());
    // A leading dot: not taken for a finished file by whoever lists the directory.
    let temporary = dir.join(format!(".{name}.tmp"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_file_is_replaced_whole_and_kept_private() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("sub/file");
        super::write(&path, b"one").expect("write");
        super::write(&path, b"two").expect("write again");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let mode =
            |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("sub")), 0o700);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["file"], "no temporary file left");
    }
}

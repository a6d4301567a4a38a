//! A file system that can lose power: [`PowerFs`] mounts an in-memory file system through FUSE
//! in which a write lives only in the "page cache" until the file is fsynced. Cutting the power
//! ([`PowerFs::cut_power`]) makes every operation fail with `EIO` from that instant, as a dead
//! disk would; [`PowerFs::restore_power`] then unmounts, throws away every write no fsync made
//! durable, and mounts again, so that what a restarted daemon reads is exactly what an fsync
//! promised.
//!
//! Faults a test can inject while the power is on:
//! - [`PowerFs::fail_fsyncs`]: the next `n` fsyncs of regular files fail with `EIO`, with
//!   Linux's semantics after such a failure ("fsyncgate"): the writes that fsync was to make
//!   durable are dropped from the disk for good (a later fsync that succeeds does not bring
//!   them back), while reads keep returning them until the power is cut. Only rewriting those
//!   bytes makes them durable again.
//! - [`PowerFs::set_capacity`]: writes that would grow the files past a number of bytes fail
//!   with `ENOSPC`.
//!
//! The model, and what it leaves out: file contents (including their length) are durable only
//! through fsync of that file; directory changes (create, unlink, rename, mkdir) are durable at
//! once, as on a file system that journals metadata synchronously. Unsynced writes are dropped
//! whole (no torn sectors). Attributes are never cached by the kernel (zero TTLs) and the
//! kernel handles POSIX locks itself, so SQLite's locking works as on a local disk for the
//! processes of one machine. Needs `/dev/fuse` and root (the mount is done with mount(2)
//! directly; there is no fusermount here).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context as _};
use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};
use rustix::mount::UnmountFlags;

/// Attributes and entries are looked up again on every use: the test changes files behind the
/// kernel's back (at restore), and a cached size would hide that.
const TTL: Duration = Duration::ZERO;

/// The file-type bits of a mode, and the type of a regular file (`mknod` makes nothing else).
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;

/// A mounted [`Disk`]. Dropping it unmounts.
pub struct PowerFs {
    disk: Arc<Disk>,
    mountpoint: PathBuf,
    session: Option<BackgroundSession>,
}

impl std::fmt::Debug for PowerFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PowerFs")
            .field("mountpoint", &self.mountpoint)
            .finish_non_exhaustive()
    }
}

/// What happened on the disk so far, for a test to check that its faults were met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskCounts {
    /// Successful fsyncs of regular files.
    pub fsyncs: u64,
    /// Fsyncs answered with `EIO` by [`PowerFs::fail_fsyncs`].
    pub failed_fsyncs: u64,
    /// Writes refused with `ENOSPC`.
    pub refused_writes: u64,
    /// Operations refused because the power was off.
    pub while_off: u64,
    /// Bytes written but never made durable, dropped by power cuts.
    pub dropped_bytes: u64,
}

impl PowerFs {
    /// Mount an empty disk at `mountpoint` (an existing, empty directory).
    ///
    /// # Errors
    /// Without `/dev/fuse`, without root, or when the kernel refuses the mount.
    pub fn mount(mountpoint: &Path) -> anyhow::Result<PowerFs> {
        crate::privileged::require_root()?;
        if !Path::new("/dev/fuse").exists() {
            bail!("needs /dev/fuse (the fuse kernel module)");
        }
        let disk = Arc::new(Disk::new());
        let session = session(&disk, mountpoint)?;
        Ok(PowerFs {
            disk,
            mountpoint: mountpoint.to_owned(),
            session: Some(session),
        })
    }

    /// Where the disk is mounted.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// Cut the power: from now on every operation fails with `EIO`, so nothing more becomes
    /// durable. Kill the processes using the disk, then [`PowerFs::restore_power`].
    pub fn cut_power(&self) {
        self.disk.state().powered = false;
    }

    /// Unmount (every process using the disk must be gone), drop every write no fsync made
    /// durable, and mount again with the power on.
    ///
    /// # Errors
    /// When the unmount or the new mount fails.
    pub fn restore_power(&mut self) -> anyhow::Result<()> {
        self.disk.state().powered = false;
        self.unmount(Duration::from_secs(10))?;
        self.disk.state().forget_unsynced();
        self.session = Some(session(&self.disk, &self.mountpoint)?);
        Ok(())
    }

    /// The next `n` fsyncs of regular files fail with `EIO`, and the writes each of them was
    /// to make durable are lost to the disk (see the module documentation).
    pub fn fail_fsyncs(&self, n: u32) {
        self.disk.state().failing_fsyncs = n;
    }

    /// Writes that would make the files' total size exceed `bytes` fail with `ENOSPC`; `None`
    /// removes the limit.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.disk.state().capacity = bytes;
    }

    /// Bytes the files hold now (what [`PowerFs::set_capacity`] limits).
    pub fn used_bytes(&self) -> u64 {
        self.disk.state().used()
    }

    /// Counts of what happened so far.
    pub fn counts(&self) -> DiskCounts {
        self.disk.state().counts
    }

    /// Unmount, waiting up to `patience` for the last processes using the disk to let go
    /// (a killed daemon's children may take a moment), then end the session's thread.
    fn unmount(&mut self, patience: Duration) -> anyhow::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let deadline = std::time::Instant::now() + patience;
        loop {
            match rustix::mount::unmount(&self.mountpoint, UnmountFlags::empty()) {
                Ok(()) => break,
                Err(rustix::io::Errno::BUSY) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    self.session = Some(session);
                    return Err(e)
                        .with_context(|| format!("unmounting {}", self.mountpoint.display()));
                }
            }
        }
        // The kernel has closed the connection, so the session's thread ends; its own unmount
        // finds nothing left to do.
        session
            .join()
            .context("the power-loss file system's thread")
    }
}

impl Drop for PowerFs {
    /// Unmounts; if something still uses the disk after a while, detaches it lazily (the
    /// kernel finishes once the last user lets go) rather than leave a mount behind.
    fn drop(&mut self) {
        if let Err(e) = self.unmount(Duration::from_secs(2)) {
            eprintln!("powerfs: {e:#}; detaching it");
            if let Err(e) = rustix::mount::unmount(&self.mountpoint, UnmountFlags::DETACH) {
                eprintln!("powerfs: detaching {}: {e}", self.mountpoint.display());
            }
            // The session's thread ends when the kernel lets go; it is not waited for.
            drop(self.session.take());
        }
    }
}

fn session(disk: &Arc<Disk>, mountpoint: &Path) -> anyhow::Result<BackgroundSession> {
    disk.state().powered = true;
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("spool-powerfs".into()),
        MountOption::RW,
        MountOption::DefaultPermissions,
    ];
    fuser::spawn_mount(Handler(Arc::clone(disk)), mountpoint, &config)
        .with_context(|| format!("mounting a FUSE file system at {}", mountpoint.display()))
}

/// The disk's contents and fault switches, shared by the test and the FUSE session thread.
struct Disk {
    state: Mutex<State>,
}

impl Disk {
    fn new() -> Disk {
        let mut nodes = HashMap::new();
        nodes.insert(
            INodeNo::ROOT.0,
            Node::new(Kind::Dir(BTreeMap::new()), 0o755),
        );
        Disk {
            state: Mutex::new(State {
                nodes,
                next_ino: INodeNo::ROOT.0 + 1,
                handles: HashMap::new(),
                next_fh: 1,
                powered: true,
                failing_fsyncs: 0,
                capacity: None,
                counts: DiskCounts::default(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep using it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct State {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Open file descriptions: inode, and how many of its fsync errors this one has been told.
    handles: HashMap<u64, (u64, u64)>,
    next_fh: u64,
    powered: bool,
    failing_fsyncs: u32,
    capacity: Option<u64>,
    counts: DiskCounts,
}

struct Node {
    kind: Kind,
    perm: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    mtime: SystemTime,
    ctime: SystemTime,
}

enum Kind {
    Dir(BTreeMap<OsString, u64>),
    File(Contents),
}

/// A regular file: what reads return, and what the disk holds. Work per fsync is in the bytes
/// written since the last one, not in the file's size.
#[derive(Default)]
struct Contents {
    /// The page cache: every write so far.
    data: Vec<u8>,
    /// What survives a power cut.
    durable: Vec<u8>,
    /// Byte ranges written since the last fsync.
    dirty: Vec<Range<usize>>,
    /// Byte ranges a failed fsync dropped: they stay as they are on the disk (zeros past its
    /// end) until written again.
    lost: Vec<Range<usize>>,
    /// Failed fsyncs so far. As on Linux since 4.13, each open file description is told of an
    /// error once, by its next fsync, whoever's fsync met it.
    errors: u64,
}

impl Contents {
    fn write(&mut self, offset: usize, bytes: &[u8]) {
        let end = offset + bytes.len();
        if self.data.len() < offset {
            // A hole: zeros the disk must get too, whatever it held there before.
            let from = self.data.len();
            self.truncate(offset);
            debug_assert_eq!(self.dirty.last(), Some(&(from..offset)));
        }
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[offset..end].copy_from_slice(bytes);
        match self.dirty.last_mut() {
            Some(last) if last.end == offset => last.end = end,
            _ => self.dirty.push(offset..end),
        }
        if !self.lost.is_empty() {
            self.lost = subtract(&self.lost, &(offset..end));
        }
    }

    fn truncate(&mut self, len: usize) {
        let from = self.data.len();
        self.data.resize(len, 0);
        if len > from {
            self.dirty.push(from..len);
        }
    }

    /// The disk gets the file's length and every byte written since the last fsync, except
    /// the lost ones.
    fn sync(&mut self) {
        self.durable.resize(self.data.len(), 0);
        for range in std::mem::take(&mut self.dirty) {
            let end = range.end.min(self.data.len());
            let mut kept: Vec<_> = std::iter::once(range.start..end).collect();
            for lost in &self.lost {
                kept = kept
                    .iter()
                    .flat_map(|k| subtract(std::slice::from_ref(k), lost))
                    .collect();
            }
            for k in kept.into_iter().filter(|k| k.start < k.end) {
                self.durable[k.clone()].copy_from_slice(&self.data[k]);
            }
        }
    }

    /// An fsync that failed: what it was to make durable is lost to the disk.
    fn fail_sync(&mut self) {
        self.lost.append(&mut self.dirty);
        self.errors += 1;
    }

    /// Power cut: the page cache is gone, the disk's contents are what a read sees. Returns
    /// how many written bytes that dropped.
    fn forget(&mut self) -> u64 {
        let dropped = self
            .dirty
            .iter()
            .chain(&self.lost)
            .map(|r| r.len() as u64)
            .sum();
        self.data = self.durable.clone();
        self.dirty.clear();
        self.lost.clear();
        dropped
    }
}

/// `ranges` without `cut`.
fn subtract(ranges: &[Range<usize>], cut: &Range<usize>) -> Vec<Range<usize>> {
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        if r.end <= cut.start || r.start >= cut.end {
            out.push(r.clone());
            continue;
        }
        if r.start < cut.start {
            out.push(r.start..cut.start);
        }
        if r.end > cut.end {
            out.push(cut.end..r.end);
        }
    }
    out
}

impl Node {
    fn new(kind: Kind, perm: u16) -> Node {
        let now = SystemTime::now();
        Node {
            nlink: if matches!(kind, Kind::Dir(_)) { 2 } else { 1 },
            kind,
            perm,
            uid: 0,
            gid: 0,
            mtime: now,
            ctime: now,
        }
    }

    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, size) = match &self.kind {
            Kind::Dir(_) => (FileType::Directory, 4096),
            Kind::File(c) => (FileType::RegularFile, c.data.len() as u64),
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: self.mtime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.ctime,
            kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl State {
    fn forget_unsynced(&mut self) {
        let mut dropped = 0;
        for node in self.nodes.values_mut() {
            if let Kind::File(c) = &mut node.kind {
                dropped += c.forget();
            }
        }
        self.counts.dropped_bytes += dropped;
        self.handles.clear();
        self.failing_fsyncs = 0;
    }

    /// `Err(EIO)` when the power is off.
    fn on(&mut self) -> Result<(), Errno> {
        if self.powered {
            Ok(())
        } else {
            self.counts.while_off += 1;
            Err(Errno::EIO)
        }
    }

    fn node(&mut self, ino: INodeNo) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)
    }

    fn dir(&mut self, ino: INodeNo) -> Result<&mut BTreeMap<OsString, u64>, Errno> {
        match &mut self.node(ino)?.kind {
            Kind::Dir(entries) => Ok(entries),
            Kind::File(_) => Err(Errno::ENOTDIR),
        }
    }

    fn file(&mut self, ino: INodeNo) -> Result<&mut Contents, Errno> {
        match &mut self.node(ino)?.kind {
            Kind::File(c) => Ok(c),
            Kind::Dir(_) => Err(Errno::EISDIR),
        }
    }

    fn lookup(&mut self, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        let ino = *self.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        Ok(self.node(INodeNo(ino))?.attr(ino))
    }

    /// A new open file description of `ino`, told of no error that came before it.
    fn open_handle(&mut self, ino: u64) -> FileHandle {
        let errors = match self.nodes.get(&ino).map(|n| &n.kind) {
            Some(Kind::File(c)) => c.errors,
            _ => 0,
        };
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, (ino, errors));
        FileHandle(fh)
    }

    fn used(&self) -> u64 {
        self.nodes
            .values()
            .map(|n| match &n.kind {
                Kind::File(c) => c.data.len() as u64,
                Kind::Dir(_) => 0,
            })
            .sum()
    }

    /// `Err(ENOSPC)` when growing a file by `growth` bytes would pass the capacity.
    fn room_for(&mut self, growth: u64) -> Result<(), Errno> {
        match self.capacity {
            Some(cap) if growth > 0 && self.used() + growth > cap => {
                self.counts.refused_writes += 1;
                Err(Errno::ENOSPC)
            }
            _ => Ok(()),
        }
    }

    fn make(
        &mut self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: Kind,
        mode: u32,
    ) -> Result<FileAttr, Errno> {
        if self.dir(parent)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let mut node = Node::new(kind, (mode & 0o7777) as u16);
        node.uid = req.uid();
        node.gid = req.gid();
        let attr = node.attr(ino);
        self.nodes.insert(ino, node);
        self.dir(parent)?.insert(name.to_owned(), ino);
        Ok(attr)
    }

    fn remove(&mut self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = *self.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        match (&self.node(INodeNo(ino))?.kind, dir) {
            (Kind::Dir(entries), true) if !entries.is_empty() => return Err(Errno::ENOTEMPTY),
            (Kind::Dir(_), false) => return Err(Errno::EISDIR),
            (Kind::File(_), true) => return Err(Errno::ENOTDIR),
            _ => {}
        }
        self.dir(parent)?.remove(name);
        // The node stays: a process may still have it open (SQLite reads an unlinked file's
        // descriptor). Tests are short; the memory is not worth a forget count.
        self.node(INodeNo(ino))?.nlink = 0;
        Ok(())
    }
}

/// The FUSE side: every request locks the disk, checks the power, and answers.
struct Handler(Arc<Disk>);

impl Handler {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> Result<T, Errno>) -> Result<T, Errno> {
        let mut state = self.0.state();
        state.on()?;
        f(&mut state)
    }
}

fn entry(reply: ReplyEntry, result: Result<FileAttr, Errno>) {
    match result {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for Handler {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entry(reply, self.with(|s| s.lookup(parent, name)));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with(|s| Ok(s.node(ino)?.attr(ino.0))) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = self.with(|s| {
            if let Some(size) = size {
                let current = s.file(ino)?.data.len() as u64;
                s.room_for(size.saturating_sub(current))?;
                let len = usize::try_from(size).map_err(|_| Errno::EFBIG)?;
                s.file(ino)?.truncate(len);
            }
            let node = s.node(ino)?;
            if let Some(mode) = mode {
                node.perm = (mode & 0o7777) as u16;
            }
            if let Some(uid) = uid {
                node.uid = uid;
            }
            if let Some(gid) = gid {
                node.gid = gid;
            }
            if let Some(t) = mtime.or(atime) {
                node.mtime = time(t);
            }
            node.ctime = SystemTime::now();
            Ok(node.attr(ino.0))
        });
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let kind = Kind::Dir(BTreeMap::new());
        entry(
            reply,
            self.with(|s| s.make(req, parent, name, kind, mode & !umask)),
        );
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & S_IFMT != S_IFREG {
            return reply.error(Errno::EPERM);
        }
        let kind = Kind::File(Contents::default());
        entry(
            reply,
            self.with(|s| s.make(req, parent, name, kind, mode & !umask)),
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let kind = Kind::File(Contents::default());
        let made = self.with(|s| {
            let attr = s.make(req, parent, name, kind, mode & !umask)?;
            Ok((attr, s.open_handle(attr.ino.0)))
        });
        match made {
            Ok((attr, fh)) => reply.created(&TTL, &attr, Generation(0), fh, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.with(|s| s.remove(parent, name, false)));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.with(|s| s.remove(parent, name, true)));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        empty(
            reply,
            self.with(|s| {
                let ino = s.dir(parent)?.remove(name).ok_or(Errno::ENOENT)?;
                if let Some(old) = s.dir(newparent)?.insert(newname.to_owned(), ino) {
                    s.node(INodeNo(old))?.nlink = 0;
                }
                Ok(())
            }),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|s| s.node(ino).map(|_| ()).map(|()| s.open_handle(ino.0))) {
            Ok(fh) => reply.opened(fh, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = self.with(|s| {
            let data = &s.file(ino)?.data;
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let end = start.saturating_add(size as usize).min(data.len());
            Ok(data[start..end].to_vec())
        });
        match result {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.with(|s| {
            let offset = usize::try_from(offset).map_err(|_| Errno::EFBIG)?;
            let current = s.file(ino)?.data.len();
            let growth = (offset + data.len()).saturating_sub(current);
            s.room_for(growth as u64)?;
            s.file(ino)?.write(offset, data);
            let node = s.node(ino)?;
            node.mtime = SystemTime::now();
            Ok(())
        });
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Even with the power off: the description is gone either way.
        self.0.state().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(
            reply,
            self.with(|s| {
                let failing = s.failing_fsyncs > 0;
                let c = s.file(ino)?;
                if failing {
                    c.fail_sync();
                } else {
                    // What is dirty now is written either way; an error met earlier through
                    // another description is still this one's to hear.
                    c.sync();
                }
                let errors = c.errors;
                let told = s
                    .handles
                    .get_mut(&fh.0)
                    .map_or(errors, |(_, told)| std::mem::replace(told, errors));
                if failing {
                    s.failing_fsyncs -= 1;
                    s.counts.failed_fsyncs += 1;
                    return Err(Errno::EIO);
                }
                s.counts.fsyncs += 1;
                if told < errors {
                    return Err(Errno::EIO);
                }
                Ok(())
            }),
        );
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Directory changes are durable at once in this model.
        empty(reply, self.with(|_| Ok(())));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = self.with(|s| {
            let entries: Vec<(OsString, u64)> = s
                .dir(ino)?
                .iter()
                .map(|(name, ino)| (name.clone(), *ino))
                .collect();
            let mut listed = vec![
                (OsString::from("."), ino.0, FileType::Directory),
                (OsString::from(".."), ino.0, FileType::Directory),
            ];
            for (name, child) in entries {
                let kind = match s.node(INodeNo(child))?.kind {
                    Kind::Dir(_) => FileType::Directory,
                    Kind::File(_) => FileType::RegularFile,
                };
                listed.push((name, child, kind));
            }
            Ok(listed)
        });
        match result {
            Ok(listed) => {
                let skip = usize::try_from(offset).unwrap_or(usize::MAX);
                for (i, (name, child, kind)) in listed.into_iter().enumerate().skip(skip) {
                    if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.with(|s| Ok((s.capacity, s.used()))) {
            Ok((capacity, used)) => {
                let total = capacity.unwrap_or(1 << 40) / 4096;
                let free = total.saturating_sub(used / 4096);
                reply.statfs(total, free, free, 1 << 20, 1 << 20, 4096, 255, 4096);
            }
            Err(e) => reply.error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(data: &[u8]) -> Contents {
        let mut c = Contents::default();
        c.write(0, data);
        c.sync();
        c
    }

    #[test]
    fn a_write_survives_a_power_cut_only_once_synced() {
        let mut c = contents(b"aaaa");
        c.write(2, b"bbbb");
        assert_eq!(c.data, b"aabbbb");
        assert_eq!(c.forget(), 4);
        assert_eq!(c.data, b"aaaa");
        c.write(2, b"cc");
        c.sync();
        c.forget();
        assert_eq!(c.data, b"aacc");
    }

    #[test]
    fn a_failed_fsync_loses_its_writes_even_after_a_later_fsync() {
        let mut c = contents(b"aaaaaaaa");
        c.write(0, b"bb");
        c.write(6, b"bbbb");
        c.fail_sync();
        // Reads still see them.
        assert_eq!(c.data, b"bbaaaabbbb");
        c.write(8, b"cc");
        c.sync();
        c.forget();
        // Only the bytes written again after the failure reached the disk.
        assert_eq!(c.data, b"aaaaaaaacc");
    }

    #[test]
    fn bytes_lost_past_the_disks_end_come_back_as_zeros() {
        let mut c = contents(b"aaaa");
        c.write(4, b"bbbb");
        c.fail_sync();
        c.write(8, b"cc");
        c.sync();
        c.forget();
        assert_eq!(c.data, b"aaaa\0\0\0\0cc");
    }

    #[test]
    fn a_hole_reaches_the_disk_as_zeros() {
        let mut c = contents(b"aaaaaaaa");
        c.truncate(2);
        c.sync();
        c.write(6, b"bb");
        c.sync();
        c.forget();
        assert_eq!(c.data, b"aa\0\0\0\0bb");
    }

    #[test]
    fn subtracting_a_range_splits_and_trims() {
        assert_eq!(
            subtract(std::slice::from_ref(&(0..10)), &(3..5)),
            vec![0..3, 5..10]
        );
        assert_eq!(
            subtract(std::slice::from_ref(&(0..10)), &(0..10)),
            Vec::<Range<usize>>::new()
        );
        assert_eq!(subtract(&[0..4, 6..8], &(3..7)), vec![0..3, 7..8]);
    }
}

//! A full disk, for real: the database lives on a small tmpfs that the test fills up. A create
//! that cannot be made durable is refused with 507 `storage_full`, readiness turns 503 while
//! the disk is full, nothing acknowledged is lost (also across kill -9), and once space is back
//! the daemon recovers by itself, without a restart.
//!
//! SQLite runs out of space in different places depending on how much room is left: appending
//! to the WAL, or growing the database file when the WAL is checkpointed (after which the WAL
//! cannot restart and must grow). There is one test for each.
//!
//! Needs root and mount(8). Without them the tests say so on stderr and pass, unless
//! `SPOOLD_REQUIRE_MOUNT=1` (CI), which turns that into a failure.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{json, Value};
use spool_testkit::privileged::{self, available};
use spool_testkit::{Api, DaemonOptions, DaemonProcess};
use tempfile::TempDir;
use tokio::task::JoinSet;

use crate::id_of;

/// Set to `1` to make these tests fail instead of skipping where they cannot mount.
const REQUIRE: &str = "SPOOLD_REQUIRE_MOUNT";
/// Clients creating at once while the disk fills up, so that group commits are refused too.
const CLIENTS: usize = 8;
/// Upper bounds of every loop below, by count and by time.
const MAX_CREATES: usize = 8000;
const TIME_LIMIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);
/// One WAL's worth of frames before SQLite checkpoints (its default of 1000 pages of 4 KiB).
const WAL_CHECKPOINT_BYTES: u64 = 1000 * 4096;

/// Little room left: the disk runs out while a commit appends to the WAL.
#[tokio::test(flavor = "multi_thread")]
async fn full_while_appending_to_the_wal() {
    let Some(tmpfs) = available(REQUIRE, Tmpfs::mount("4m")) else {
        return;
    };
    let filled = fill_until_refused(&tmpfs, 256 * 1024).await;
    assert!(
        filled.db_file_bytes < WAL_CHECKPOINT_BYTES / 4,
        "expected no checkpoint yet: the database file has {} bytes",
        filled.db_file_bytes
    );
    full_then_recover(filled).await;
}

/// More room than one WAL takes (the writer finishes a checkpoint once the WAL passes 8 MiB,
/// whatever the timing of the passive ones): the WAL is checkpointed and reused while the disk
/// fills, and it is the database file, growing at a checkpoint, that runs out first.
#[tokio::test(flavor = "multi_thread")]
async fn full_while_checkpointing() {
    let Some(tmpfs) = available(REQUIRE, Tmpfs::mount("24m")) else {
        return;
    };
    let filled = fill_until_refused(&tmpfs, 14 * 1024 * 1024).await;
    assert!(
        filled.db_file_bytes > WAL_CHECKPOINT_BYTES / 4,
        "expected checkpoints to have grown the database file: it has {} bytes",
        filled.db_file_bytes
    );
    full_then_recover(filled).await;
}

/// A daemon on a disk that has just refused creates.
struct Filled<'a> {
    tmpfs: &'a Tmpfs,
    opts: DaemonOptions,
    daemon: DaemonProcess,
    api: Api,
    filler: Filler,
    acknowledged: Vec<String>,
    db_file_bytes: u64,
}

/// Start a daemon on the tmpfs, fill the disk but for `room` bytes, then create from
/// [`CLIENTS`] clients until each has been refused once. Every refusal is 507 `storage_full`.
async fn fill_until_refused(tmpfs: &Tmpfs, room: u64) -> Filled<'_> {
    let db = tmpfs.path().join("data/spoold.db");
    let config = tmpfs.path().join("spoold.toml");
    std::fs::write(&config, "[tasks.noop]\ncommand = [\"/bin/true\"]\n").expect("config");
    let opts = DaemonOptions::new(&db).args(["--config".to_owned(), config.display().to_string()]);
    let daemon = DaemonProcess::start(opts.clone()).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let mut acknowledged = Vec::new();
    for _ in 0..3 {
        acknowledged.push(create_ok(&api).await);
    }
    assert_eq!(readyz(&api).await.0, 200);

    let mut filler = Filler::create(&tmpfs.path().join("filler"));
    filler.fill();
    filler.release(room);
    let before = acknowledged.len();
    let mut clients = JoinSet::new();
    for _ in 0..CLIENTS {
        let api = api.clone();
        clients.spawn(async move {
            let started = Instant::now();
            let mut created = Vec::new();
            for _ in 0..MAX_CREATES / CLIENTS {
                assert!(started.elapsed() < TIME_LIMIT, "creates never failed");
                let (status, body) = api.create(padded_delivery()).await.expect("create");
                if status != 201 {
                    return (created, Some((status, body)));
                }
                created.push(id_of(&body));
            }
            (created, None)
        });
    }
    while let Some(client) = clients.join_next().await {
        let (created, refused) = client.expect("client task");
        acknowledged.extend(created);
        let (status, body) = refused.expect("the disk filled up within the create limit");
        assert_storage_full(status, &body);
    }
    assert!(
        acknowledged.len() > before,
        "no create succeeded in the room left, so the edge was not tested"
    );
    let db_file_bytes = std::fs::metadata(&db).expect("database file").len();
    Filled {
        tmpfs,
        opts,
        daemon,
        api,
        filler,
        acknowledged,
        db_file_bytes,
    }
}

/// Fill the last bytes too and check the daemon while the disk is full; then give the space
/// back and check that it recovers by itself, and that kill -9 loses nothing acknowledged.
async fn full_then_recover(filled: Filled<'_>) {
    let Filled {
        tmpfs,
        opts,
        mut daemon,
        api,
        mut filler,
        mut acknowledged,
        ..
    } = filled;

    // The filesystem is full now, but SQLite still has room of its own: what a refused commit
    // had already written at the end of the WAL. Smaller commits can use it, so creating goes
    // on until one of them is refused too; only a little room is left after that, less than
    // one create takes.
    filler.fill();
    let started = Instant::now();
    for n in 0.. {
        assert!(
            n < MAX_CREATES && started.elapsed() < TIME_LIMIT,
            "creates on a full filesystem kept succeeding"
        );
        let (status, body) = api.create(padded_delivery()).await.expect("create");
        if status != 201 {
            assert_storage_full(status, &body);
            break;
        }
        acknowledged.push(id_of(&body));
    }
    for _ in 0..3 {
        let big = json!({"targetUrl": "http://127.0.0.1:9/never", "body": "x".repeat(64 * 1024)});
        let (status, body) = api.create(big).await.expect("create");
        assert_storage_full(status, &body);
    }
    // A task submission is refused the same way (it is smaller than a create: some may still
    // fit in what SQLite has left; those are acknowledged and must survive too).
    let mut tasks = Vec::new();
    for n in 0.. {
        assert!(
            n < MAX_CREATES,
            "task submissions on a full filesystem kept succeeding"
        );
        let (status, body) = submit_task(&api, n).await;
        if status != 201 {
            assert_storage_full(status, &body);
            break;
        }
        tasks.push(id_of(&body));
    }
    let (status, body) = readyz(&api).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "not_ready", "{body}");
    assert_eq!(
        api.metric("spoold_ready").await.expect("metrics"),
        Some(0.0)
    );
    assert_all_exist(&api, &acknowledged).await;

    drop(filler);
    std::fs::remove_file(tmpfs.path().join("filler")).expect("remove the filler");
    let started = Instant::now();
    loop {
        let (status, body) = readyz(&api).await;
        if status == 200 {
            break;
        }
        assert!(
            started.elapsed() < TIME_LIMIT,
            "not ready again after space came back: {status} {body}"
        );
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(
        api.metric("spoold_ready").await.expect("metrics"),
        Some(1.0)
    );
    for _ in 0..3 {
        acknowledged.push(create_ok(&api).await);
    }
    assert_all_exist(&api, &acknowledged).await;

    daemon.kill9();
    let stderr = daemon.stderr();
    assert!(stderr.contains("storage is full"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let daemon = DaemonProcess::start(opts).await.expect("restart");
    let api = Api::new(daemon.base_url());
    assert_eq!(readyz(&api).await.0, 200);
    assert_all_exist(&api, &acknowledged).await;
    for id in &tasks {
        let (status, _, body) = api
            .request(http::Method::GET, &format!("/v1/tasks/{id}"), None)
            .await
            .expect("get task");
        assert_eq!(status, 200, "acknowledged task {id} lost: {body:?}");
    }
    create_ok(&api).await;
}

/// Submit a task of the declared type, not due for decades (the runner leaves it alone).
async fn submit_task(api: &Api, n: usize) -> (u16, Value) {
    let task = json!({"type": "noop", "idempotencyKey": format!("full-{n}"), "notBefore": "2099-01-01T00:00:00Z"});
    let (status, _, body) = api
        .request(
            http::Method::POST,
            "/v1/tasks",
            Some(serde_json::to_vec(&task).expect("json")),
        )
        .await
        .expect("submit");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// A delivery with a few KiB of body that is never attempted (notBefore far ahead), so its row
/// stays.
fn padded_delivery() -> Value {
    json!({
        "targetUrl": "http://127.0.0.1:9/never",
        "notBefore": "2099-01-01T00:00:00Z",
        "body": {"pad": "x".repeat(4096)},
    })
}

async fn create_ok(api: &Api) -> String {
    let (status, body) = api.create(padded_delivery()).await.expect("create");
    assert_eq!(status, 201, "{body}");
    id_of(&body)
}

fn assert_storage_full(status: u16, body: &Value) {
    assert_eq!(
        (status, &body["error"]["code"]),
        (507, &json!("storage_full")),
        "{body}"
    );
}

async fn readyz(api: &Api) -> (u16, Value) {
    let (status, _, body) = api
        .request(http::Method::GET, "/readyz", None)
        .await
        .expect("readyz");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn assert_all_exist(api: &Api, ids: &[String]) {
    for id in ids {
        let (status, body) = api.get(id).await.expect("get");
        assert_eq!(status, 200, "acknowledged delivery {id} lost: {body}");
        assert_eq!(body["status"], "pending", "{body}");
    }
}

/// A file that takes up the free space of its filesystem.
struct Filler {
    file: File,
}

impl Filler {
    fn create(path: &Path) -> Filler {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)
            .expect("create the filler file");
        Filler { file }
    }

    /// Append until the filesystem has no room left, in ever smaller pieces. Bounded: the
    /// filesystem is a few MiB.
    fn fill(&mut self) {
        for size in [64 * 1024, 4096, 512, 1] {
            let chunk = vec![0xa5_u8; size];
            for _ in 0..1_000_000 {
                match self.file.write(&chunk) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::StorageFull => break,
                    Err(e) => panic!("fill: {e}"),
                }
            }
        }
    }

    /// Give `bytes` back to the filesystem.
    fn release(&mut self, bytes: u64) {
        let len = self.file.metadata().expect("filler size").len();
        self.file
            .set_len(len.saturating_sub(bytes))
            .expect("shrink the filler");
    }
}

/// A tmpfs of its own, mounted on a temporary directory; unmounted (lazily, in case a
/// process still has a file open there) on drop, before the directory is removed.
pub(crate) struct Tmpfs {
    mnt: PathBuf,
    _dir: TempDir,
}

impl Tmpfs {
    pub(crate) fn mount(size: &str) -> anyhow::Result<Tmpfs> {
        privileged::require_root()?;
        let dir = TempDir::new().context("temp dir")?;
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).context("create the mount point")?;
        let options = format!("size={size},mode=0700");
        let args = ["-t", "tmpfs", "-o", &options, "tmpfs"].map(OsStr::new);
        privileged::run("mount", args.iter().copied().chain([mnt.as_os_str()]))?;
        Ok(Tmpfs { mnt, _dir: dir })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Err(e) = privileged::run("umount", [OsStr::new("-l"), self.mnt.as_os_str()]) {
            eprintln!("cannot unmount {}: {e:#}", self.mnt.display());
        }
    }
}

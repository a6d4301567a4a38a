//! Write errors in the middle of a group commit, under concurrent load of mixed sizes, with the
//! real daemon: the answers must match what is on disk, in both directions. Every create
//! answered 2xx is there after kill -9 and a restart; every create answered 5xx is not.
//!
//! SQLite may roll back a whole transaction when one statement of it fails with an I/O error
//! (typically while it spills a large batch's pages to the WAL), which a writer that batches many
//! callers into one transaction must notice. Two ways to make writes fail for real: a file-size
//! limit (`RLIMIT_FSIZE`, with `SIGXFSZ` ignored, so a write past it fails with `EFBIG`, which
//! SQLite reports as an I/O error) and a full filesystem (a tiny tmpfs, `ENOSPC`).
//!
//! The file-size test needs `prlimit` (util-linux) and fails instead of skipping when it is
//! missing if `SPOOLD_REQUIRE_TOOLS=1`; the tmpfs test needs root and mount(8)
//! (`SPOOLD_REQUIRE_MOUNT=1`).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;
use spool_testkit::privileged::{self, available};
use spool_testkit::{Api, DaemonOptions, DaemonProcess};
use tempfile::TempDir;
use tokio::task::JoinSet;

use crate::disk_full::Tmpfs;

/// Clients sending creates with a body of about 1 MiB (two of them in one batch make SQLite
/// spill pages before COMMIT) and clients sending small ones, at the same time.
const BIG_CLIENTS: usize = 8;
const SMALL_CLIENTS: usize = 12;
const BIG_BODY: usize = 1000000;
const SMALL_BODY: usize = 2000;
/// How long the load runs at least, and past the first refusal; bounded per client by count
/// too.
const LOAD_FOR: Duration = Duration::from_secs(4);
/// How long the load may run to meet the fault at all (a slow machine writes less per second).
const LOAD_AT_MOST: Duration = Duration::from_secs(30);
const MAX_CREATES_PER_CLIENT: usize = 5000;

/// The daemon's files may not grow past 32 MiB: first everything fits, then the WAL or the
/// database file hits the limit in the middle of batches.
#[tokio::test(flavor = "multi_thread")]
async fn answers_match_the_disk_under_a_file_size_limit() {
    let Some(()) = available(
        "SPOOLD_REQUIRE_TOOLS",
        privileged::run("prlimit", ["--version"]).map(drop),
    ) else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let db = dir.path().join("data/spoold.db");
    // `trap '' XFSZ` makes the signal ignored, which survives both execs: a write past the
    // limit then fails with EFBIG instead of killing the daemon.
    let limited = DaemonOptions::new(&db).wrapper([
        "sh",
        "-c",
        "trap '' XFSZ; exec prlimit --fsize=33554432 -- \"$@\"",
        "sh",
    ]);
    let mut daemon = DaemonProcess::start(limited).await.expect("daemon");
    let answers = mixed_load(&Api::new(daemon.base_url())).await;
    daemon.kill9();
    let stderr = daemon.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");

    let daemon = DaemonProcess::start(DaemonOptions::new(&db))
        .await
        .expect("restart without the limit");
    answers.check_against(&Api::new(daemon.base_url())).await;
}

/// The data directory on a 12 MiB tmpfs that fills up under the same load. After kill -9 the
/// directory is copied to a disk with room, and a daemon started on the copy.
#[tokio::test(flavor = "multi_thread")]
async fn answers_match_the_disk_when_it_fills_up() {
    let Some(tmpfs) = available("SPOOLD_REQUIRE_MOUNT", Tmpfs::mount("12m")) else {
        return;
    };
    let data = tmpfs.path().join("data");
    let mut daemon = DaemonProcess::start(DaemonOptions::new(data.join("spoold.db")))
        .await
        .expect("daemon");
    let answers = mixed_load(&Api::new(daemon.base_url())).await;
    daemon.kill9();
    let stderr = daemon.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");

    let copy = TempDir::new().expect("temp dir");
    copy_dir(&data, &copy.path().join("data")).expect("copy the data directory");
    let daemon = DaemonProcess::start(DaemonOptions::new(copy.path().join("data/spoold.db")))
        .await
        .expect("start on the copy");
    answers.check_against(&Api::new(daemon.base_url())).await;
}

/// How the daemon answered each create, by idempotency key (every create has its own).
#[derive(Debug, Default)]
struct Answers {
    acknowledged: Vec<String>,
    refused: Vec<String>,
    /// No answer at all (the connection broke): either outcome is allowed.
    unanswered: usize,
}

impl Answers {
    /// Every acknowledged create is stored, and no refused one is.
    async fn check_against(&self, api: &Api) {
        let stored = stored_keys(api).await;
        let lost: Vec<_> = self
            .acknowledged
            .iter()
            .filter(|k| !stored.contains(*k))
            .collect();
        let kept: Vec<_> = self
            .refused
            .iter()
            .filter(|k| stored.contains(*k))
            .collect();
        assert!(
            lost.is_empty() && kept.is_empty(),
            "{} of {} acknowledged creates are missing ({lost:?}); {} of {} refused creates were \
             stored ({kept:?})",
            lost.len(),
            self.acknowledged.len(),
            kept.len(),
            self.refused.len(),
        );
    }
}

/// [`BIG_CLIENTS`] and [`SMALL_CLIENTS`] create for [`LOAD_FOR`], and on until a create has
/// been refused (at most [`LOAD_AT_MOST`]), so the fault lands in the middle of the load however
/// fast the machine writes. The load must have seen both answers, or it proved nothing.
async fn mixed_load(api: &Api) -> Answers {
    let mut clients = JoinSet::new();
    let started = Instant::now();
    let refused = Arc::new(AtomicBool::new(false));
    for client in 0..BIG_CLIENTS + SMALL_CLIENTS {
        let api = api.clone();
        let refused = Arc::clone(&refused);
        let size = if client < BIG_CLIENTS {
            BIG_BODY
        } else {
            SMALL_BODY
        };
        clients.spawn(async move {
            let mut answers = Answers::default();
            for n in 0..MAX_CREATES_PER_CLIENT {
                let elapsed = started.elapsed();
                if elapsed > LOAD_AT_MOST || (elapsed > LOAD_FOR && refused.load(Ordering::Relaxed))
                {
                    break;
                }
                let key = format!("c{client}-{n}");
                let request = json!({
                    "targetUrl": "http://127.0.0.1:9/never",
                    "notBefore": "2099-01-01T00:00:00Z",
                    "idempotencyKey": key,
                    "body": "x".repeat(size),
                });
                match api.create(request).await {
                    Ok((201, _)) => answers.acknowledged.push(key),
                    Ok((500 | 507, body)) => {
                        let code = body["error"]["code"].as_str().unwrap_or_default();
                        assert!(
                            matches!(code, "persistence_failed" | "storage_full"),
                            "{body}"
                        );
                        answers.refused.push(key);
                        refused.store(true, Ordering::Relaxed);
                    }
                    Ok((status, body)) => panic!("unexpected answer {status}: {body}"),
                    Err(_) => answers.unanswered += 1,
                }
            }
            answers
        });
    }
    let mut all = Answers::default();
    while let Some(client) = clients.join_next().await {
        let answers = client.expect("client task");
        all.acknowledged.extend(answers.acknowledged);
        all.refused.extend(answers.refused);
        all.unanswered += answers.unanswered;
    }
    eprintln!(
        "mixed load: {} acknowledged, {} refused, {} unanswered",
        all.acknowledged.len(),
        all.refused.len(),
        all.unanswered
    );
    assert!(
        all.acknowledged.len() >= 10 && !all.refused.is_empty(),
        "the load never met the fault, or never got through: {all:?}"
    );
    all
}

/// The idempotency keys of every stored delivery, page by page.
async fn stored_keys(api: &Api) -> HashSet<String> {
    let mut keys = HashSet::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = api
            .list(&format!("limit=500&cursor={cursor}"))
            .await
            .expect("list");
        assert_eq!(status, 200, "{page}");
        for d in page["deliveries"].as_array().expect("deliveries") {
            if let Some(key) = d["idempotencyKey"].as_str() {
                keys.insert(key.to_owned());
            }
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => return keys,
        }
    }
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).context("create the copy")?;
    for entry in std::fs::read_dir(from).context("read the data directory")? {
        let entry = entry?;
        let name = entry.file_name();
        // The shared-memory index is rebuilt from the WAL; copying it could only confuse. The
        // database is files; directories (the maildrop, task files) are not needed.
        if name.to_string_lossy().ends_with("-shm") || entry.file_type()?.is_dir() {
            continue;
        }
        std::fs::copy(entry.path(), to.join(&name))
            .with_context(|| format!("copy {}", Path::new(OsStr::new(&name)).display()))?;
    }
    Ok(())
}

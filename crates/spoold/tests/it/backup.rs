//! Backups of the embedded database while the daemon runs, the ways the book gives
//! (docs/src/production.md, "Backups"): its recipe run as it is written there (`VACUUM INTO`
//! by `sqlite3` under `umask 077`, then `PRAGMA integrity_check`), sqlite3's `.backup FILE`, and
//! `VACUUM INTO` from another SQLite. Taken under a stream of creates, each backup is a whole
//! database (integrity check ok) that holds every delivery acknowledged before it began, and a
//! daemon starts on it and serves them; the recipe's copy is private (0600) whatever the umask
//! of whoever runs it.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use spool_testkit::privileged::{self, available};
use spool_testkit::{Api, DaemonOptions, DaemonProcess};
use tempfile::TempDir;

use crate::{db_path, id_of, WAIT};

const WRITERS: usize = 8;

#[tokio::test(flavor = "multi_thread")]
async fn backups_taken_under_load_hold_every_acknowledged_delivery() {
    let Some(_) = available(
        "SPOOLD_REQUIRE_TOOLS",
        privileged::run("sqlite3", ["--version"]),
    ) else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let db = db_path(&dir);
    let mut daemon = DaemonProcess::start(DaemonOptions::new(&db))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());

    // Creates of mixed sizes, never stopping until the backups are taken.
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (api, acknowledged, stop) = (api.clone(), acknowledged.clone(), stop.clone());
        writers.spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let body = "x".repeat((w * 7919 + n * 104_729) % 20_000);
                let (status, created) = api
                    .create(json!({"targetUrl": format!("http://127.0.0.1:9/{w}/{n}"),
                                   "notBefore": "2099-01-01T00:00:00Z", "body": body}))
                    .await
                    .expect("create");
                assert_eq!(status, 201, "{created}");
                acknowledged.lock().expect("lock").push(id_of(&created));
            }
        });
    }
    let acknowledged_by = |at_least: usize| {
        let acknowledged = acknowledged.clone();
        async move {
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let now: BTreeSet<String> =
                    acknowledged.lock().expect("lock").iter().cloned().collect();
                if now.len() >= at_least {
                    return now;
                }
                assert!(tokio::time::Instant::now() < deadline, "creates stalled");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };

    // sqlite3's .backup (the online backup API), as an operator would run it.
    let before_cli = acknowledged_by(300).await;
    let cli_copy = dir.path().join("backup-cli.db");
    let mut cli = tokio::process::Command::new("sqlite3");
    cli.arg(&db)
        .arg(format!(".backup '{}'", cli_copy.display()));
    let out = spool_testkit::run_in_group(cli, WAIT)
        .await
        .expect("sqlite3 .backup");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // VACUUM INTO, from another connection of any SQLite (here rusqlite's).
    let before_vacuum = acknowledged_by(before_cli.len() + 300).await;
    let vacuum_copy = dir.path().join("backup-vacuum.db");
    let (from, to) = (db.clone(), vacuum_copy.clone());
    tokio::task::spawn_blocking(move || {
        rusqlite::Connection::open(&from)
            .expect("open the live database")
            .execute("VACUUM INTO ?1", [to.display().to_string()])
            .expect("VACUUM INTO")
    })
    .await
    .expect("vacuum");

    // The book's recipe, as an operator runs it, from a shell whose umask would make any file
    // it creates readable by every user.
    let before_recipe = acknowledged_by(before_vacuum.len() + 300).await;
    let recipe_copy = dir.path().join("backup-recipe.db");
    let [copy_line, check_line] = book_recipe(&db, &recipe_copy);
    for (line, expected) in [(copy_line, ""), (check_line, "ok\n")] {
        let mut sh = tokio::process::Command::new("sh");
        sh.arg("-c").arg(format!("umask 022; {line}"));
        let out = spool_testkit::run_in_group(sh, WAIT)
            .await
            .expect("the recipe's command");
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout) == expected,
            "{line}: {out:?}"
        );
    }
    let mode = std::fs::metadata(&recipe_copy)
        .expect("the copy")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the copy is {mode:o}");

    let after = acknowledged_by(before_recipe.len() + 100).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = writers.join_next().await {
        done.expect("a writer");
    }
    daemon.terminate().await.expect("stop");
    assert!(after.len() > before_recipe.len());

    for (copy, wanted) in [
        (cli_copy, before_cli),
        (vacuum_copy, before_vacuum),
        (recipe_copy, before_recipe),
    ] {
        assert_restorable(dir.path(), &copy, &wanted).await;
    }
}

/// The two commands of the book's backup recipe (its first `sh` block under "## Backups"),
/// `sudo -u spoold` left out and its paths `db` and `copy`: the copy, then its check.
fn book_recipe(db: &Path, copy: &Path) -> [String; 2] {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/production.md"),
    )
    .expect("docs/src/production.md");
    let section = &page[page.find("## Backups").expect("a Backups section")..];
    let start = section.find("```sh\n").expect("its commands") + "```sh\n".len();
    let end = start + section[start..].find("```").expect("their end");
    let lines: Vec<String> = section[start..end]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.strip_prefix("sudo -u spoold ")
                .unwrap_or_else(|| panic!("not run as spoold: {l}"))
                .replace("/var/lib/spoold/spoold.db", &db.display().to_string())
                .replace("/var/lib/spoold/backup.db", &copy.display().to_string())
        })
        .collect();
    let [copy_line, check_line]: [String; 2] = lines
        .try_into()
        .unwrap_or_else(|l| panic!("two commands, not {l:?}"));
    assert!(copy_line.contains("umask 077"), "{copy_line}");
    assert!(
        check_line.contains("PRAGMA integrity_check"),
        "{check_line}"
    );
    [copy_line, check_line]
}

/// `copy` is a whole database that a daemon starts on, serving every delivery in `wanted`.
async fn assert_restorable(dir: &Path, copy: &Path, wanted: &BTreeSet<String>) {
    let check: String = rusqlite::Connection::open(copy)
        .expect("open the backup")
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok", "{}", copy.display());
    // Restored as an operator would: the file put where a daemon keeps its database.
    let restored: PathBuf = dir
        .join(copy.file_stem().expect("a name"))
        .join("spoold.db");
    std::fs::create_dir_all(restored.parent().expect("a parent")).expect("dir");
    std::fs::copy(copy, &restored).expect("restore");
    let mut daemon = DaemonProcess::start(DaemonOptions::new(&restored))
        .await
        .expect("a daemon on the backup");
    let api = Api::new(daemon.base_url());
    let (_, _, stats) = api
        .request(http::Method::GET, "/v1/stats", None)
        .await
        .expect("stats");
    let stats: serde_json::Value = serde_json::from_slice(&stats).expect("JSON");
    let pending = stats["deliveries"]["pending"].as_u64().unwrap_or(0);
    assert!(
        pending >= wanted.len() as u64,
        "{}: {pending} pending, {} acknowledged before the backup",
        copy.display(),
        wanted.len()
    );
    for id in wanted {
        let (status, delivery) = api.get(id).await.expect("get");
        assert_eq!(
            status,
            200,
            "{}: {id} is missing: {delivery}",
            copy.display()
        );
    }
    daemon.terminate().await.expect("stop");
}

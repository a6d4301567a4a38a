//! The foreign builds (arm64, armv7), tested and not only built: each `spoold` and `spoolctl`
//! that `scripts/package` cross-builds runs here under Debian's qemu-user-static
//! (`qemu-aarch64-static ./spoold …`: no binfmt registration, nothing changed on the host),
//! black box, through a smoke of what must not break on another architecture: acknowledged
//! creates survive a kill -9 while a batch is pending and each is delivered once after the
//! restart; a task that times out has its whole process group ended.
//!
//! The builds are named by `SPOOLD_TEST_EMULATED`: entries `EMULATOR=DIR` separated by white
//! space, DIR holding that architecture's `spoold` and `spoolctl` (`scripts/test
//! --with-packages` builds them and sets it). Without it the test says so and passes, unless
//! `SPOOLD_REQUIRE_TOOLS=1` (CI) makes that a failure.
//!
//! What emulation does not verify: timings (an emulated daemon is many times slower), cgroups,
//! and the foreign supervisor of task attempts where the emulator refuses
//! `PR_SET_CHILD_SUBREAPER` (qemu-user 7.2, Debian 12's, does): there the supervisor refuses
//! to run the attempt (it never runs a task whose descendants it cannot own), which is checked,
//! and the attempt's processes are ended by the host's own `spoold` as supervisor instead.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use spool_testkit::{privileged, Api, DaemonOptions, DaemonProcess, Receiver};
use tempfile::TempDir;

use crate::tasks::{id, kill_all, submit, wait_gone, wait_task, Setup};
use crate::{db_path, id_of, FAST_RETRIES};

/// How long an emulated daemon may take to start (an unoptimised build under TCG).
const EMULATED_START: Duration = Duration::from_secs(60);
/// How long everything may take to be delivered after the restart.
const EMULATED_WAIT: Duration = Duration::from_secs(90);

/// One foreign build and the emulator that runs it.
#[derive(Debug, Clone)]
struct Foreign {
    emulator: PathBuf,
    dir: PathBuf,
}

impl Foreign {
    fn binary(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A daemon of this build on `dir`'s database, run by the emulator.
    fn daemon(&self, dir: &TempDir) -> DaemonOptions {
        DaemonOptions::new(db_path(dir))
            .program(self.binary("spoold"))
            .wrapper([self.emulator.clone()])
            .args(FAST_RETRIES.iter().copied())
            .ready_timeout(EMULATED_START)
    }
}

/// The builds `SPOOLD_TEST_EMULATED` names, each checked to be there and to run; `None` (after
/// saying why) when there are none to test.
fn foreign_builds() -> Option<Vec<Foreign>> {
    let named = std::env::var("SPOOLD_TEST_EMULATED").unwrap_or_default();
    let builds = (|| {
        if named.trim().is_empty() {
            anyhow::bail!(
                "no foreign builds named (SPOOLD_TEST_EMULATED; scripts/test --with-packages \
                 cross-builds them and needs qemu-user-static)"
            );
        }
        named
            .split_whitespace()
            .map(|entry| {
                let (emulator, dir) = entry.split_once('=').ok_or_else(|| {
                    anyhow::anyhow!("SPOOLD_TEST_EMULATED: {entry:?} is not EMULATOR=DIR")
                })?;
                let build = Foreign {
                    emulator: emulator.into(),
                    dir: dir.into(),
                };
                for name in ["spoold", "spoolctl"] {
                    let out = std::process::Command::new(&build.emulator)
                        .arg(build.binary(name))
                        .arg("--version")
                        .stdin(Stdio::null())
                        .output()
                        .map_err(|e| anyhow::anyhow!("{}: {e}", build.emulator.display()))?;
                    anyhow::ensure!(
                        out.status.success(),
                        "{} {} --version: {}",
                        build.emulator.display(),
                        build.binary(name),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                Ok(build)
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })();
    privileged::available("SPOOLD_REQUIRE_TOOLS", builds)
}

/// Queue with the foreign `spoolctl` (run by the emulator); the id it printed.
async fn send(build: &Foreign, api: &str, url: &str, n: usize) -> String {
    let out = tokio::process::Command::new(&build.emulator)
        .arg(build.binary("spoolctl"))
        .args(["send", url, "-d", &format!("{{\"n\": {n}}}")])
        .env("SPOOLD_URL", api)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(EMULATED_START, out)
        .await
        .expect("spoolctl send within its bound")
        .expect("spoolctl send runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "spoolctl send: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // `queued  ID  …`
    stdout
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no id in {stdout:?}"))
        .to_owned()
}

/// Each foreign build: creates acknowledged (by the API and by its own `spoolctl send`) while
/// the receiver is down survive a kill -9 that lands while they are pending and a create is
/// being answered, and each is delivered exactly once after the restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_build_delivers_every_acknowledged_create_once_across_a_kill9() {
    let Some(builds) = foreign_builds() else {
        return;
    };
    for build in builds {
        let dir = TempDir::new().expect("temp dir");
        let mut receiver = Receiver::start().await.expect("receiver");
        receiver.stop().await;
        let mut daemon = DaemonProcess::start(build.daemon(&dir))
            .await
            .unwrap_or_else(|e| panic!("{build:?}: {e:#}"));
        let base = daemon.base_url();
        let api = Api::new(base.clone());
        let mut acknowledged = Vec::new();
        for n in 0..5 {
            acknowledged.push(send(&build, &base, &receiver.url("/hook"), n).await);
        }
        // A batch in flight when the kill lands: creates answered 201 count, the rest may or
        // may not be there.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let creating = {
            let api = api.clone();
            let url = receiver.url("/hook");
            tokio::spawn(async move {
                for n in 5..400 {
                    match api
                        .create(json!({"targetUrl": url, "body": {"n": n}}))
                        .await
                    {
                        Ok((201, created)) => {
                            if tx.send(id_of(&created)).is_err() {
                                return;
                            }
                        }
                        _ => return,
                    }
                }
            })
        };
        let mut seen = 0;
        while seen < 20 {
            acknowledged.push(
                rx.recv()
                    .await
                    .expect("creates acknowledged before the kill"),
            );
            seen += 1;
        }
        daemon.kill9();
        let _ = tokio::time::timeout(Duration::from_secs(30), creating).await;
        while let Ok(created) = rx.try_recv() {
            acknowledged.push(created);
        }

        receiver.restart().await.expect("receiver back");
        let daemon = DaemonProcess::start(build.daemon(&dir))
            .await
            .unwrap_or_else(|e| panic!("{build:?} after kill -9: {e:#}"));
        let api = Api::new(daemon.base_url());
        for created in &acknowledged {
            api.wait_status(created, &["succeeded"], EMULATED_WAIT)
                .await
                .unwrap_or_else(|e| panic!("{build:?}: {created} after kill -9: {e:#}"));
        }
        let mut received: HashMap<String, usize> = HashMap::new();
        for request in receiver.requests() {
            let delivery = request
                .header("x-spoold-delivery-id")
                .expect("a delivery id")
                .to_owned();
            *received.entry(delivery).or_default() += 1;
        }
        for created in &acknowledged {
            assert_eq!(
                received.get(created),
                Some(&1),
                "{build:?}: {created} was received {:?} times",
                received.get(created)
            );
        }
    }
}

/// Each foreign build runs a task that times out and ends its whole process group (a child in
/// the group and one that left it with `setsid`), with the host's `spoold` as the attempts'
/// supervisor; its own supervisors (`spoold-attempt`, which the packages ship, and `spoold`
/// re-executed), where the emulator refuses them a subreaper, refuse the attempt rather than run
/// what they could not end.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_build_ends_a_timed_out_task_and_its_group() {
    let Some(builds) = foreign_builds() else {
        return;
    };
    for build in builds {
        let dir = TempDir::new().expect("temp dir");
        let setup = Setup::new(dir.path());
        let config = setup.config().display().to_string();
        let supervisors = [
            format!(
                "{} {}",
                build.emulator.display(),
                build.binary("spoold-attempt")
            ),
            format!("{} {}", build.emulator.display(), build.binary("spoold")),
            spool_testkit::cargo_bin("spoold").display().to_string(),
        ];
        for supervisor in supervisors {
            let state = TempDir::new().expect("temp dir");
            let daemon = DaemonProcess::start(
                build
                    .daemon(&state)
                    .args(["--config", &config, "--task-cgroup", "off"])
                    .env("SPOOLD_TASK_SUPERVISOR", &supervisor),
            )
            .await
            .unwrap_or_else(|e| panic!("{build:?}: {e:#}"));
            let api = Api::new(daemon.base_url());
            let _ = std::fs::remove_file(setup.dir.join("pids"));
            let (status, task) = submit(&api, json!({"type": "hang"})).await;
            assert_eq!(status, 201, "{task}");
            let done = wait_task(&api, &id(&task), &["timed_out", "failed"]).await;
            let refused = done["status"] == "failed"
                && done["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("child subreaper"));
            if refused && supervisor.starts_with(&build.emulator.display().to_string()) {
                assert!(setup.pids().is_empty(), "a refused attempt ran: {done}");
                spool_testkit::skip::skipped(
                    &format!(
                        "{} refuses PR_SET_CHILD_SUBREAPER: the foreign supervisor refused the \
                         attempt (checked) and ran no task",
                        build.emulator.display()
                    ),
                    "a qemu-user that passes prctl(PR_SET_CHILD_SUBREAPER) through, or the \
                     architecture itself",
                );
                continue;
            }
            assert_eq!(done["status"], "timed_out", "{supervisor}: {done}");
            let pids = setup.pids();
            assert_eq!(pids.len(), 3, "{pids:?}");
            let left = wait_gone(&pids).await;
            kill_all(&left);
            assert!(left.is_empty(), "{supervisor}: left running: {left:?}");
            let strays = setup.processes();
            kill_all(&strays);
            assert!(strays.is_empty(), "{supervisor}: left running: {strays:?}");
        }
    }
}

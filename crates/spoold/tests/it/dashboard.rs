//! The dashboard (`/ui`) in a real headless Chromium at 1280×800: `tests/ui/dashboard.cjs`
//! drives Debian's Chromium with playwright-core against a real spoold that asks for a bearer
//! token and holds failed and waiting deliveries, an at-most-once delivery in manual review
//! (its target reconciled by fingerprint) and tasks — the pages load and fit the width, what
//! needs a person comes first, the numbers match the API, an at-most-once delivery shows its
//! fingerprint, query and checks, a task its result, an unknown address is "not found", the
//! buttons change state (bulk actions after counting), an export downloads what the API
//! exports, the keyboard works, and each page is photographed into `target/ui-screenshots/`
//! (with `UPDATE_SNAPSHOTS=1`, into `docs/src/ui/` too: the book's pictures, one for each page,
//! shown on its dashboard page). Needs `SPOOLD_TEST_UITOOLS` (a directory with playwright-core
//! in its node_modules, which `scripts/test` installs) and Chromium; `SPOOLD_REQUIRE_TOOLS`
//! makes their absence a failure, as CI does.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use spool_testkit::{
    Api, CreateBehavior, DaemonProcess, Receiver, RemoteApi, Reply, SearchBehavior,
};
use tempfile::TempDir;

use crate::{id_of, process_opts, WAIT};

const TOKEN: &str = "dashboard-token-0123456789abcdef";

/// The pages photographed, by the name of their file.
const PAGES: [&str; 11] = [
    "sign-in",
    "overview",
    "deliveries",
    "delivery",
    "at-most-once",
    "bulk",
    "targets",
    "tasks",
    "task",
    "locks",
    "not-found",
];

/// The browser tools, or `None` (with the reason said) when they are not there.
fn tools() -> Option<(PathBuf, PathBuf)> {
    let required = std::env::var_os("SPOOLD_REQUIRE_TOOLS").is_some();
    let chromium = PathBuf::from(
        std::env::var_os("SPOOLD_TEST_CHROMIUM").unwrap_or_else(|| "/usr/bin/chromium".into()),
    );
    let missing = match std::env::var_os("SPOOLD_TEST_UITOOLS") {
        None => "SPOOLD_TEST_UITOOLS is not set (scripts/test sets it when npm is there to \
                 install playwright-core)"
            .to_owned(),
        Some(_) if !chromium.exists() => format!("{} is missing", chromium.display()),
        Some(dir) => return Some((PathBuf::from(dir), chromium)),
    };
    assert!(!required, "the dashboard test needs its browser: {missing}");
    spool_testkit::skip::skipped(
        &format!("no browser for the dashboard: {missing}"),
        "Chromium (Debian package chromium) and npm, under scripts/test; \
         SPOOLD_REQUIRE_TOOLS=1 makes this a failure",
    );
    None
}

/// Lets the test's task finish, however the test ends: its script waits for this file.
struct Release(PathBuf);

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, b"go");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_the_api_and_its_buttons_act() {
    let Some((uitools, chromium)) = tools() else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write token");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // A task that says one line, waits for the test to say go, says two more and leaves its
    // result.
    let go = dir.path().join("go");
    let _release = Release(go.clone());
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        format!(
            "[tasks.talk]\ncommand = [\"/bin/sh\", \"-c\", \"echo line 1; i=0; while [ ! -e \\\"$GO\\\" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; echo line 2; echo line 3; printf 'said 3 lines' > \\\"$SPOOLD_RESULT_FILE\\\"\"]\ntimeout = \"60s\"\nlocks = [\"mailbox\"]\nenv = {{ GO = {go:?} }}\n"
        ),
    )
    .expect("write config");
    let opts = process_opts(&dir).args([
        "--auth-token-file".to_owned(),
        token_file.display().to_string(),
        "--config".to_owned(),
        config.display().to_string(),
        // The at-most-once delivery's target is asked at once.
        "--reconcile-base".to_owned(),
        "100ms".to_owned(),
    ]);
    let daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::with_token(daemon.base_url(), TOKEN);
    let r = Receiver::start().await.expect("receiver");
    // The last with a long URL and a long error, which the listing cuts to fit.
    let long = format!("?q={}", "long-value-".repeat(30));
    r.push_replies([
        Reply::status(404),
        Reply::status(404),
        Reply::status(404).body("no such record ".repeat(40)),
    ]);
    for n in 0..3 {
        let path = format!("/rejected/{n}{}", if n == 2 { long.as_str() } else { "" });
        let (_, d) = api
            .create(json!({"targetUrl": r.url(&path), "maxAttempts": 1, "body": {"n": n}}))
            .await
            .expect("create");
        api.wait_status(&id_of(&d), &["failed"], WAIT)
            .await
            .expect("failed");
    }
    let (status, _) = api
        .create(json!({"targetUrl": r.url("/later"), "notBefore": "2099-01-01T00:00:00Z"}))
        .await
        .expect("create");
    assert_eq!(status, 201);
    // An order the remote took but never answered, and listed twice when asked: a person
    // decides.
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Reset);
    remote.set_search(SearchBehavior::Duplicate);
    let (status, order) = api
        .create(json!({
            "targetUrl": remote.url("/records"),
            "mode": "at_most_once",
            "fingerprint": "order-4711",
            "body": {"fingerprint": "order-4711", "amount": 42},
            "reconcile": {"url": remote.url("/records?fingerprint={fingerprint}"),
                          "matchesPointer": "/data", "observationWindow": "1h"},
        }))
        .await
        .expect("create");
    assert_eq!(status, 201, "{order}");
    let order = id_of(&order);
    api.wait_status(&order, &["manual_review"], WAIT)
        .await
        .expect("in manual review");

    let (status, _, task) = api
        .request(
            http::Method::POST,
            "/v1/tasks",
            Some(br#"{"type": "talk"}"#.to_vec()),
        )
        .await
        .expect("submit");
    assert_eq!(status, 201);
    let task: serde_json::Value = serde_json::from_slice(&task).expect("JSON");
    let task = task["id"].as_str().expect("task id").to_owned();
    // Running before the browser looks, so the overview's counts hold still.
    crate::tasks::wait_task(&api, &task, &["running"]).await;
    // More than a page of tasks for later, for the listing's pages and a bulk cancel.
    for _ in 0..51 {
        let (status, _, _) = api
            .request(
                http::Method::POST,
                "/v1/tasks",
                Some(br#"{"type": "talk", "notBefore": "2099-01-01T00:00:00Z"}"#.to_vec()),
            )
            .await
            .expect("submit");
        assert_eq!(status, 201);
    }

    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ui/dashboard.cjs");
    let mut node = tokio::process::Command::new("node");
    node.arg(script)
        .env("NODE_PATH", uitools.join("node_modules"))
        .env("BASE_URL", daemon.base_url())
        .env("TOKEN", TOKEN)
        .env("TARGET", r.url("/").trim_end_matches('/'))
        .env("SHOTS", &shots)
        .env("TASK", &task)
        .env("ORDER", &order)
        .env(
            "RECONCILE",
            remote.url("/records?fingerprint={fingerprint}"),
        )
        .env("GO", &go)
        .env("CHROMIUM", &chromium);
    let out = spool_testkit::run_in_group(node, Duration::from_secs(120))
        .await
        .expect("the browser run ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("dashboard: every check held"), "{said}");
    let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/ui");
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some();
    for page in PAGES {
        let file = format!("{page}.png");
        assert!(shots.join(&file).is_file(), "{file}");
        if update {
            std::fs::copy(shots.join(&file), docs.join(&file)).expect("update docs/src/ui");
        }
        // The book's pictures (docs/src/dashboard.md): one for each page.
        assert!(
            docs.join(&file).is_file(),
            "docs/src/ui/{file} is missing: UPDATE_SNAPSHOTS=1 cargo nextest run -p spoold dashboard"
        );
    }
}

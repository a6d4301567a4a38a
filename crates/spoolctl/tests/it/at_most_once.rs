//! At-most-once deliveries through `spoolctl` against a real `spoold`: the `send` flags become
//! the delivery's mode, fingerprint and reconcile query; `resolve` settles an `unknown` or
//! `manual_review` delivery; `checks` lists what reconciliation asked. The target is the
//! testkit's [`RemoteApi`], which commits a record and then stalls past spoold's request
//! timeout, so the outcome is really unknown.

use serde_json::{json, Value};
use spool_testkit::{CreateBehavior, RemoteApi, SearchBehavior};

use crate::{check_ok, row, row_id, stderr, stdout, Spoold, WAIT};

/// Far enough ahead that the daemon never attempts the delivery during a test.
const FAR_FUTURE: &str = "2099-01-01T00:00:00Z";

/// A stalled request times out after two seconds (long enough for a `cancel` to find it in
/// flight on a busy machine); the lease must outlast it (see spoold's `--lease` rule).
const QUICK_TIMEOUT: [&str; 4] = ["--request-timeout", "2s", "--lease", "4s"];

/// The maximum of the `ATTEMPTS` column (`0/MAX`) of a delivery's row: spoold's default.
fn max_attempts(out: &str) -> String {
    out.split("  ")
        .nth(3)
        .and_then(|a| a.split_once('/'))
        .map(|(_, max)| max.to_owned())
        .unwrap_or_else(|| panic!("no attempts column in {out:?}"))
}

/// The value of `get`'s first `  NAME:  value` line (their alignment depends on which fields a
/// delivery has).
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("  {name}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::trim)
}

#[tokio::test(flavor = "multi_thread")]
async fn send_at_most_once_shapes_the_delivery() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/orders");
    let query = s.receiver.url("/orders?ref={fingerprint}");
    let out = check_ok(
        &s.ctl(&[
            "send",
            &url,
            "-d",
            r#"{"order":7}"#,
            "--not-before",
            FAR_FUTURE,
            "--at-most-once",
            "--fingerprint",
            "order-7",
            "--reconcile-url",
            &query,
            "--reconcile-method",
            "post",
            "--reconcile-header",
            "x-api-key: s3cret",
            "--matches-pointer",
            "/data",
            "--reconcile-id-pointer",
            "/order_id",
            "--observation-window",
            "90s",
            "--remote-id-pointer",
            "/id",
        ])
        .await,
    );
    let id = row_id(&out);
    let max = max_attempts(&out);
    assert_eq!(
        out,
        row("queued", &id, "pending", &format!("0/{max}"), "POST", &url)
    );

    let d: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["get", &id, "--json"]).await)).expect("JSON");
    assert_eq!(d["mode"], "at_most_once", "{d}");
    assert_eq!(d["fingerprint"], "order-7", "{d}");
    assert_eq!(d["remoteIdPointer"], "/id", "{d}");
    assert_eq!(
        d["reconcile"],
        json!({
            "url": query,
            "method": "POST",
            "headers": {"X-Api-Key": "[redacted]"},
            "matchesPointer": "/data",
            "remoteIdPointer": "/order_id",
            "observationWindow": "1m30s",
        }),
        "{d}"
    );

    let text = check_ok(&s.ctl(&["get", &id]).await);
    assert_eq!(field(&text, "mode"), Some("at_most_once"), "{text}");
    assert_eq!(field(&text, "fingerprint"), Some("order-7"), "{text}");
    assert_eq!(field(&text, "remote id pointer"), Some("/id"), "{text}");
    for line in [
        &format!("\nreconcile: POST {query}\n")[..],
        "\n  matches pointer:     /data\n",
        "\n  remote id pointer:   /order_id\n",
        "\n  observation window:  1m30s\n",
        "\n  headers:\n    X-Api-Key: [redacted]\n",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    let revealed = check_ok(&s.ctl(&["get", &id, "--reveal"]).await);
    assert!(revealed.contains("\n    X-Api-Key: s3cret\n"), "{revealed}");

    // Nothing has been asked yet.
    assert_eq!(
        check_ok(&s.ctl(&["checks", &id]).await),
        "AT  HTTP  MATCHES  CODE  DURATION  ERROR\n"
    );
    assert_eq!(
        check_ok(&s.ctl(&["checks", &id, "--json"]).await),
        "{\"checks\":[]}\n"
    );

    // Only an unknown or manual_review delivery can be resolved.
    let o = s
        .ctl(&["resolve", &id, "--failed", "--note", "not needed"])
        .await;
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "spoolctl: spoold returned HTTP 409 (invalid_transition): this delivery is still \
         pending (its next attempt is scheduled); resolve applies only to unknown and \
         manual_review deliveries (and a failed at-most-once one that may have arrived)\n"
    );
    assert_eq!(stdout(&o), "");

    for status in ["unknown", "manual_review"] {
        assert_eq!(
            check_ok(&s.ctl(&["list", "--status", status]).await),
            "",
            "{status}"
        );
        let json: Value = serde_json::from_str(&check_ok(
            &s.ctl(&["list", "--status", status, "--json"]).await,
        ))
        .expect("JSON");
        assert_eq!(json["count"], 0, "{status}: {json}");
    }
    assert!(s.receiver.requests().is_empty());
}

/// spoold refuses what only it can judge; spoolctl passes its message on in one line.
#[tokio::test(flavor = "multi_thread")]
async fn spoold_judges_the_values() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/orders");
    let o = s
        .ctl(&[
            "send",
            &url,
            "--at-most-once",
            "--reconcile-url",
            &s.receiver.url("/orders?ref={fingerprint}"),
        ])
        .await;
    assert_eq!(o.status.code(), Some(13), "stderr: {}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "spoolctl: spoold returned HTTP 400 (invalid_delivery): reconcile.url uses \
         {fingerprint}, but the delivery has none: set fingerprint or idempotencyKey; nothing \
         was queued, and the same command would be refused again\n"
    );
    assert_eq!(stdout(&o), "");
}

/// A request that timed out leaves the delivery `unknown`; the reconcile query finds the one
/// record the target committed, and the delivery succeeds with that record's id.
#[tokio::test(flavor = "multi_thread")]
async fn reconciliation_settles_an_unknown_outcome() {
    let s = Spoold::start_args(&QUICK_TIMEOUT).await;
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Stall);
    remote.set_search(SearchBehavior::Honest);
    let url = remote.url("/records");
    let out = check_ok(
        &s.ctl(&[
            "send",
            &url,
            "-d",
            r#"{"fingerprint":"fp-1"}"#,
            "--at-most-once",
            "--fingerprint",
            "fp-1",
            "--reconcile-url",
            &remote.url("/records?fingerprint={fingerprint}"),
            "--matches-pointer",
            "/data",
        ])
        .await,
    );
    let id = row_id(&out);
    s.api()
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("reconciled");
    assert_eq!(remote.creates(), 1, "sent once");

    let out = check_ok(&s.ctl(&["checks", &id]).await);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["AT", "HTTP", "MATCHES", "CODE", "DURATION", "ERROR"],
        "{out}"
    );
    assert_eq!(rows.len(), 2, "{out}");
    // AT and DURATION vary.
    assert_eq!(
        [rows[1][1], rows[1][2], rows[1][3], rows[1][5]],
        ["200", "1", "-", "-"],
        "{out}"
    );
    let json: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["checks", &id, "--json"]).await)).expect("JSON");
    assert_eq!(json["checks"][0]["matches"], 1, "{json}");

    let text = check_ok(&s.ctl(&["get", &id]).await);
    assert_eq!(field(&text, "status"), Some("succeeded"), "{text}");
    assert_eq!(field(&text, "remote id"), Some("rec-1"), "{text}");
    assert_eq!(field(&text, "checks"), Some("1"), "{text}");
    assert!(field(&text, "unknown since").is_some(), "{text}");
    // Settled: nothing left to check.
    assert_eq!(field(&text, "next check"), None, "{text}");
}

/// Without a reconcile query an `unknown` delivery waits for a person: `list`, `wait`, `stats`
/// and `cancel` show it, and `resolve --succeeded` settles it with the remote id given.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_resolves_an_unknown_outcome() {
    let s = Spoold::start_args(&QUICK_TIMEOUT).await;
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Stall);
    let url = remote.url("/records");
    let out = check_ok(
        &s.ctl(&[
            "send",
            &url,
            "-d",
            r#"{"fingerprint":"fp-2"}"#,
            "--at-most-once",
            "--idempotency-key",
            "order-2",
        ])
        .await,
    );
    let id = row_id(&out);
    let max = max_attempts(&out);

    // While the request is stalled, it may already have reached the target: no cancel.
    assert!(remote.wait_for_creates(1, WAIT).await, "sent");
    let o = s.ctl(&["cancel", &id]).await;
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    assert!(
        stderr(&o).starts_with(
            "spoolctl: spoold returned HTTP 409 (invalid_transition): \
             this at-most-once delivery is in_flight: its request may already have reached \
             the target, so it cannot be canceled"
        ),
        "{}",
        stderr(&o)
    );

    s.api()
        .wait_status(&id, &["unknown"], WAIT)
        .await
        .expect("unknown after the timeout");
    let listed = check_ok(&s.ctl(&["list", "--status", "unknown"]).await);
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(
        listed.lines().nth(1).is_some_and(|l| l.starts_with(&id)),
        "{listed}"
    );

    let text = check_ok(&s.ctl(&["get", &id]).await);
    assert_eq!(field(&text, "status"), Some("unknown"), "{text}");
    // The idempotency key stands in for a fingerprint.
    assert_eq!(field(&text, "fingerprint"), Some("order-2"), "{text}");
    for name in ["unknown since", "review at", "next check"] {
        assert!(field(&text, name).is_some(), "{name} in\n{text}");
    }

    // `wait` stops at `unknown` with its own code: waiting here would not settle it.
    let o = s.ctl(&["wait", &id, "--timeout", "30s"]).await;
    assert_eq!(o.status.code(), Some(10), "stderr: {}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "spoolctl: the outcome of delivery {id} is unknown (the request may have reached \
             the target): spoold asks the target if it has a reconcile query (`spoolctl checks \
             {id}`), or a person decides (`spoolctl resolve {id} …`)\n"
        )
    );

    let stats = check_ok(&s.ctl(&["stats"]).await);
    let lines: Vec<&str> = stats.lines().collect();
    assert_eq!(
        lines[0],
        "deliveries      canceled 0, failed 0, in_flight 0, manual_review 0, pending 0, \
         succeeded 0, unknown 1",
        "{stats}"
    );
    assert!(lines[1].starts_with("tasks "), "{stats}");
    assert!(
        lines[3].contains(", 1 unknown (since the daemon started, "),
        "{stats}"
    );

    let out = check_ok(
        &s.ctl(&[
            "resolve",
            &id,
            "--succeeded",
            "--remote-id",
            "rec-1",
            "--note",
            "found it in the CRM",
        ])
        .await,
    );
    assert_eq!(
        out,
        row(
            "resolve",
            &id,
            "succeeded",
            &format!("1/{max}"),
            "POST",
            &url
        ) + "earlier error (before it succeeded): no response within 2s (request timeout)\n",
        "the row, then why the outcome was unknown, labelled as what came before the success"
    );
    let d: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["get", &id, "--json"]).await)).expect("JSON");
    assert_eq!(d["remoteId"], "rec-1", "{d}");

    let out = check_ok(&s.ctl(&["transitions", &id]).await);
    let last: Vec<&str> = out
        .lines()
        .last()
        .expect("a transition")
        .split_whitespace()
        .collect();
    assert_eq!(
        last[1..],
        [
            "unknown",
            "succeeded",
            "1",
            "resolved",
            "found",
            "it",
            "in",
            "the",
            "CRM"
        ],
        "{out}"
    );

    // Settled once; a second decision is refused.
    let o = s
        .ctl(&["resolve", &id, "--failed", "--note", "changed my mind"])
        .await;
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "spoolctl: spoold returned HTTP 409 (invalid_transition): this delivery already \
         succeeded; resolve applies only to unknown and manual_review deliveries (and a failed \
         at-most-once one that may have arrived)\n"
    );
    assert_eq!(remote.creates(), 1, "never sent again");
}

/// Two matches are for a person to sort out (`manual_review`); `resolve --resend` sends the
/// request again, and the remote id comes from the answer through `--remote-id-pointer`.
#[tokio::test(flavor = "multi_thread")]
async fn resend_after_manual_review() {
    let s = Spoold::start_args(&QUICK_TIMEOUT).await;
    let remote = RemoteApi::start().await;
    remote.set_create_once(CreateBehavior::Stall);
    remote.set_search(SearchBehavior::Duplicate);
    let url = remote.url("/records");
    let out = check_ok(
        &s.ctl(&[
            "send",
            &url,
            "-d",
            r#"{"fingerprint":"fp-3"}"#,
            "--at-most-once",
            "--fingerprint",
            "fp-3",
            "--reconcile-url",
            &remote.url("/records?fingerprint={fingerprint}"),
            "--matches-pointer",
            "/data",
            "--remote-id-pointer",
            "/id",
        ])
        .await,
    );
    let id = row_id(&out);
    s.api()
        .wait_status(&id, &["manual_review"], WAIT)
        .await
        .expect("two matches: manual review");
    // `wait` says a person decides, with its own code.
    let o = s.ctl(&["wait", &id]).await;
    assert_eq!(o.status.code(), Some(7), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("needs a person"), "{}", stderr(&o));
    let listed = check_ok(&s.ctl(&["list", "--status", "manual_review"]).await);
    assert!(
        listed.lines().nth(1).is_some_and(|l| l.starts_with(&id)),
        "{listed}"
    );
    let out = check_ok(&s.ctl(&["checks", &id]).await);
    let cells: Vec<&str> = out
        .lines()
        .nth(1)
        .expect("a check")
        .split_whitespace()
        .collect();
    assert_eq!([cells[1], cells[2]], ["200", "2"], "{out}");

    let out = check_ok(
        &s.ctl(&[
            "resolve",
            &id,
            "--resend",
            "--note",
            "the duplicates are a search bug",
        ])
        .await,
    );
    assert!(out.starts_with(&format!("resolve  {id}  ")), "{out}");
    s.api()
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("sent again");
    assert_eq!(remote.creates(), 2);
    let d: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["get", &id, "--json"]).await)).expect("JSON");
    assert_eq!(d["remoteId"], "rec-2", "{d}");
}

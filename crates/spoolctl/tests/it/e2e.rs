//! `spoolctl` against a real `spoold` process over loopback TCP, delivering to a real receiver:
//! the exact rows, messages and exit codes a script sees, and the bytes the target receives.

use serde_json::Value;
use spool_testkit::Reply;

use crate::{check_ok, row, row_id, run, spoolctl, stderr, stdout, Spoold, WAIT};

/// Far enough ahead that the daemon never attempts the delivery during a test.
const FAR_FUTURE: &str = "2099-01-01T00:00:00Z";

#[tokio::test(flavor = "multi_thread")]
async fn send_queues_and_the_target_gets_the_body_verbatim() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/hook");
    let body = r#"{ "a" :  1 }"#;

    let out = check_ok(&s.ctl(&["send", &url, "-d", body]).await);
    let id = row_id(&out);
    assert_eq!(out, row("queued", &id, "pending", "0/100", "POST", &url));

    let seen = s
        .receiver
        .wait_for_requests(1, WAIT)
        .await
        .expect("delivered");
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].path, "/hook");
    assert_eq!(seen[0].body.as_ref(), body.as_bytes());
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotency_key_returns_the_existing_delivery_or_conflicts() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/once");
    let body = r#"{ "a" :  1 }"#;
    let send = |body| ["send", url.as_str(), "--idempotency-key", "k", "-d", body];

    let first = check_ok(&s.ctl(&send(body)).await);
    let id = row_id(&first);
    assert_eq!(first, row("queued", &id, "pending", "0/100", "POST", &url));
    s.api()
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");

    let again = check_ok(&s.ctl(&send(body)).await);
    assert_eq!(
        again,
        row("existing", &id, "succeeded", "1/100", "POST", &url)
    );

    let o = s.ctl(&send(r#"{"a":2}"#)).await;
    assert_eq!(o.status.code(), Some(13), "stderr: {}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "spoolctl: spoold returned HTTP 409 (idempotency_conflict): idempotency key was \
             already used for a different request (delivery {id}): this one differs in body; \
             repeat that request exactly to get the delivery back, or use another key; \
             nothing was queued, and the same command would be refused again\n"
        )
    );
    assert_eq!(stdout(&o), "");

    let seen = s.receiver.requests();
    assert_eq!(seen.len(), 1, "one delivery, delivered once");
    assert_eq!(seen[0].body.as_ref(), body.as_bytes());
}

/// `-d @FILE` as curl takes it: the JSON in FILE (and `-d @-` from stdin), sent as it is.
#[tokio::test(flavor = "multi_thread")]
async fn curl_style_data_at_file_sends_the_json_it_holds() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/at");
    let path = s.dir.path().join("body.json");
    std::fs::write(&path, "{ \"from\": \"a file\" }\n").expect("write body file");
    let at_file = format!("@{}", path.to_str().expect("utf-8 path"));
    row_id(&check_ok(&s.ctl(&["send", &url, "-d", &at_file]).await));
    row_id(&check_ok(
        &s.ctl_stdin(&["send", &url, "--data", "@-"], b"[1, 2]")
            .await,
    ));
    let seen = s
        .receiver
        .wait_for_requests(2, WAIT)
        .await
        .expect("delivered");
    let mut bodies: Vec<&[u8]> = seen.iter().map(|r| r.body.as_ref()).collect();
    bodies.sort_unstable();
    assert_eq!(bodies, [&b"[1, 2]"[..], b"{ \"from\": \"a file\" }"]);
    assert!(seen
        .iter()
        .all(|r| r.header("content-type") == Some("application/json")));
}

/// `send`'s exit status tells a job what to do: 13 when spoold refused the request for good (an
/// unknown secret here; the same line would be refused again, with or without `--wait`), 1 when
/// it was not queued for now (a database over its admission limit: try again later).
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_send_exits_13_and_one_to_try_later_1() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/refused");
    for wait in [&[][..], &["--wait"][..]] {
        let o = s
            .ctl(&[&["send", url.as_str(), "--sign", "nope"][..], wait].concat())
            .await;
        assert_eq!(o.status.code(), Some(13), "{wait:?}: {}", stderr(&o));
        let said = stderr(&o);
        assert!(
            said.starts_with("spoolctl: spoold returned HTTP 400 (unknown_secret): ")
                && said.ends_with(
                    "; nothing was queued, and the same command would be refused again\n"
                ),
            "{said}"
        );
        assert_eq!(stdout(&o), "");
    }
    assert!(s.receiver.requests().is_empty());

    let full = Spoold::start_args(&["--max-db-bytes", "1"]).await;
    let o = full.ctl(&["send", &url]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let said = stderr(&o);
    assert!(
        said.starts_with("spoolctl: spoold returned HTTP 507 (journal_full): ")
            && !said.contains("refused again"),
        "{said}"
    );
}

/// A job run again with the same key and `--expires-in` asks for another deadline: the
/// refusal names the field and the delivery, and says which flag gives a fixed one;
/// `--expires-at` repeats its request exactly.
#[tokio::test(flavor = "multi_thread")]
async fn a_rerun_with_expires_in_is_told_about_expires_at() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/nightly");
    let send = |key: &'static str, deadline: &'static [&'static str]| {
        let mut args = vec!["send", url.as_str(), "--idempotency-key", key];
        args.extend_from_slice(deadline);
        args
    };
    let first = check_ok(&s.ctl(&send("nightly-1", &["--expires-in", "1h"])).await);
    let id = row_id(&first);
    let o = s.ctl(&send("nightly-1", &["--expires-in", "1h"])).await;
    assert_eq!(o.status.code(), Some(13), "stderr: {}", stderr(&o));
    let said = stderr(&o);
    let prefix = format!(
        "spoolctl: spoold returned HTTP 409 (idempotency_conflict): idempotency key was already \
         used for a different request (delivery {id}): this one differs in expiresAt ("
    );
    assert!(said.starts_with(&prefix), "{said}");
    assert!(
        said.ends_with(
            "; repeat that request exactly to get the delivery back, or use another key; \
             --expires-in counts from each run, so a run with the same --idempotency-key asks \
             for another time: give a fixed one (--expires-at TIME); nothing was queued, and \
             the same command would be refused again\n"
        ),
        "{said}"
    );
    assert_eq!(stdout(&o), "");

    let deadline = &[
        "--not-before",
        FAR_FUTURE,
        "--expires-at",
        "2099-01-02T00:00:00Z",
    ];
    let first = check_ok(&s.ctl(&send("nightly-2", deadline)).await);
    let id = row_id(&first);
    let again = check_ok(&s.ctl(&send("nightly-2", deadline)).await);
    assert_eq!(
        again,
        row("existing", &id, "pending", "0/100", "POST", &url)
    );
    let (_, d) = s.api().get(&id).await.expect("get");
    assert_eq!(d["expiresAt"], "2099-01-02T00:00:00.000Z", "{d}");
}

#[tokio::test(flavor = "multi_thread")]
async fn options_after_the_url_shape_the_request() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/put?x=1");
    let out = check_ok(
        &s.ctl(&[
            "send",
            &url,
            "-X",
            "PUT",
            "-H",
            "X-A: 1",
            "-H",
            "x-b:two words",
        ])
        .await,
    );
    let id = row_id(&out);
    assert_eq!(out, row("queued", &id, "pending", "0/100", "PUT", &url));

    let seen = s
        .receiver
        .wait_for_requests(1, WAIT)
        .await
        .expect("delivered");
    let r = &seen[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("PUT", "/put"));
    assert_eq!(r.query.as_deref(), Some("x=1"));
    assert_eq!(r.header("x-a"), Some("1"));
    assert_eq!(r.header("x-b"), Some("two words"));
    assert!(r.body.is_empty(), "{:?}", r.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn binary_body_from_a_file_arrives_byte_for_byte() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/bin");
    let bytes: Vec<u8> = [0x00, 0xff, b'\n', 0x80, b'{', 0x00, 0xfe, b' ']
        .into_iter()
        .chain(0..=255)
        .collect();
    let path = s.dir.path().join("body.bin");
    std::fs::write(&path, &bytes).expect("write body file");

    let out = check_ok(
        &s.ctl(&[
            "send",
            &url,
            "--data-binary",
            path.to_str().expect("utf-8 path"),
        ])
        .await,
    );
    row_id(&out);
    let seen = s
        .receiver
        .wait_for_requests(1, WAIT)
        .await
        .expect("delivered");
    assert_eq!(seen[0].body.as_ref(), bytes.as_slice());
}

#[tokio::test(flavor = "multi_thread")]
async fn json_body_from_stdin() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/stdin");
    let out = check_ok(
        &s.ctl_stdin(
            &["send", &url, "--data-file", "-"],
            b"\n{\"from\" : \"stdin\",\n \"n\": [1,2]}\n",
        )
        .await,
    );
    row_id(&out);
    let seen = s
        .receiver
        .wait_for_requests(1, WAIT)
        .await
        .expect("delivered");
    // Surrounding whitespace is dropped; everything inside is kept as typed.
    assert_eq!(
        seen[0].body_text(),
        "{\"from\" : \"stdin\",\n \"n\": [1,2]}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn send_wait_exits_with_the_outcome() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/wait");

    s.receiver.push_replies([Reply::status(204)]);
    let out = check_ok(&s.ctl(&["send", &url, "--wait", "--interval", "20ms"]).await);
    let id = row_id(&out);
    assert_eq!(
        out,
        row("queued", &id, "pending", "0/100", "POST", &url)
            + &row("wait", &id, "succeeded", "1/100", "POST", &url)
    );

    s.receiver
        .push_replies([Reply::status(400).body("no such thing")]);
    let o = s.ctl(&["send", &url, "--wait", "--interval", "20ms"]).await;
    assert_eq!(o.status.code(), Some(3), "stderr: {}", stderr(&o));
    assert_eq!(stderr(&o), "");
    let out = stdout(&o);
    let id = row_id(&out);
    assert_eq!(
        out,
        row("queued", &id, "pending", "0/100", "POST", &url)
            + &row("wait", &id, "failed", "1/100", "POST", &url)
            + "last error: HTTP 400: no such thing\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_times_out_and_reports_cancellation() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/later");
    let out = check_ok(&s.ctl(&["send", &url, "--not-before", FAR_FUTURE]).await);
    let id = row_id(&out);

    let o = s.ctl(&["wait", &id, "--timeout", "300ms"]).await;
    assert_eq!(o.status.code(), Some(5), "stderr: {}", stderr(&o));
    assert_eq!(
        stdout(&o),
        row("wait", &id, "pending", "0/100", "POST", &url)
    );
    assert_eq!(
        stderr(&o),
        format!("spoolctl: timed out after 300ms: delivery {id} is still pending\n")
    );

    let out = check_ok(&s.ctl(&["cancel", &id]).await);
    assert_eq!(out, row("cancel", &id, "canceled", "0/100", "POST", &url));

    let o = s.ctl(&["wait", &id]).await;
    assert_eq!(o.status.code(), Some(4), "stderr: {}", stderr(&o));
    assert_eq!(stderr(&o), "");
    assert_eq!(
        stdout(&o),
        row("wait", &id, "canceled", "0/100", "POST", &url)
    );
    assert!(s.receiver.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn list_pages_and_json() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/listed");
    let mut ids = Vec::new();
    for _ in 0..3 {
        let out = check_ok(&s.ctl(&["send", &url, "--not-before", FAR_FUTURE]).await);
        ids.push(row_id(&out));
    }
    // UPDATED is an age ("now", "3s ago"): compared as <age>, cells separated by one space.
    // No rows: nothing at all, not even the header.
    let table = |ids: &[String]| {
        if ids.is_empty() {
            return String::new();
        }
        let mut t = String::from("ID STATUS ATTEMPTS UPDATED METHOD TARGET\n");
        for id in ids {
            t.push_str(&format!("{id} pending 0/100 <age> POST {url}\n"));
        }
        t
    };
    let check_ok = |o: &std::process::Output| ages(&check_ok(o));
    let stdout = |o: &std::process::Output| ages(&stdout(o));

    // Newest first by default; oldest first on request, and for work still to be sent.
    let newest: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(check_ok(&s.ctl(&["list"]).await), table(&newest));
    assert_eq!(
        check_ok(&s.ctl(&["list", "--oldest-first"]).await),
        table(&ids)
    );

    let o = s
        .ctl(&["list", "--status", "pending", "--limit", "1"])
        .await;
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), table(&ids[..1]));
    let err = stderr(&o);
    let cursor = err
        .strip_prefix("more: run again with --cursor ")
        .and_then(|c| c.strip_suffix(", or --all\n"))
        .unwrap_or_else(|| panic!("no cursor line: {err:?}"));
    assert!(
        !cursor.is_empty() && !cursor.contains(char::is_whitespace),
        "{err:?}"
    );

    // The cursor continues where the first page stopped, in the same order.
    let o = s
        .ctl(&[
            "list", "--status", "pending", "--limit", "1", "--cursor", cursor,
        ])
        .await;
    assert_eq!(stdout(&o), table(&ids[1..2]), "stderr: {}", stderr(&o));
    let o = s
        .ctl(&["list", "--newest-first", "--limit", "2", "--all"])
        .await;
    assert_eq!(stdout(&o), table(&newest), "stderr: {}", stderr(&o));
    // By target (a URL or its origin) and by creation time.
    let origin = format!("http://127.0.0.1:{}", s.receiver.port());
    for target in [url.as_str(), origin.as_str()] {
        let out = check_ok(&s.ctl(&["list", "--target", target, "--oldest-first"]).await);
        assert_eq!(out, table(&ids), "{target}");
    }
    let elsewhere = check_ok(&s.ctl(&["list", "--target", "http://127.0.0.1:1"]).await);
    assert_eq!(elsewhere, table(&[]));
    let recent = check_ok(&s.ctl(&["list", "--since", "1h", "--oldest-first"]).await);
    assert_eq!(recent, table(&ids));
    let future = check_ok(&s.ctl(&["list", "--since", "2099-01-01T00:00:00Z"]).await);
    assert_eq!(future, table(&[]));
    let o = s.ctl(&["list", "--since", "yesterday"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // --all follows every cursor and prints one table.
    let out = check_ok(
        &s.ctl(&["list", "--status", "pending", "--limit", "1", "--all"])
            .await,
    );
    assert_eq!(out, table(&ids));
    // With no rows, nothing at all (a crontab mailing `list --status failed` mails nothing),
    // and exit 0; the JSON is the API's as ever.
    let o = s.ctl(&["list", "--status", "failed"]).await;
    assert_eq!(
        (o.status.code(), crate::stdout(&o), crate::stderr(&o)),
        (Some(0), String::new(), String::new())
    );
    let none: Value = serde_json::from_str(&crate::check_ok(
        &s.ctl(&["list", "--status", "failed", "--json"]).await,
    ))
    .expect("JSON");
    assert_eq!(none, serde_json::json!({"count": 0, "deliveries": []}));

    let json: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["list", "--json"]).await)).expect("JSON");
    assert_eq!(json["count"], 3, "{json}");
    let listed: Vec<&str> = json["deliveries"]
        .as_array()
        .expect("deliveries array")
        .iter()
        .map(|d| d["id"].as_str().expect("id"))
        .collect();
    assert_eq!(listed, newest);

    let out = check_ok(&s.ctl(&["list", "--json", "--all", "--limit", "2"]).await);
    assert_eq!(out.lines().count(), 1, "one document: {out}");
    let json: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["count"], 3, "{json}");
    assert_eq!(json["deliveries"].as_array().map(Vec::len), Some(3));
}

/// A success clears a delivery's last error; `get` still shows the error before it, from the
/// attempts, as its help and the book say (`--json` is the API's delivery, unchanged).
#[tokio::test(flavor = "multi_thread")]
async fn get_shows_the_error_before_a_success() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/later");
    s.receiver.push_replies([
        Reply::status(503).body("busy"),
        Reply::status(503).body("still busy"),
    ]);
    let id = row_id(&check_ok(&s.ctl(&["send", &url, "-d", "{}"]).await));
    s.api()
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let shown = check_ok(&s.ctl(&["get", &id]).await);
    assert!(
        shown.ends_with(
            "earlier error (before it succeeded): HTTP 503: still busy (attempt 2)\n\
             earlier error (before it succeeded) code: http_status\n"
        ),
        "{shown}"
    );
    let json: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["get", &id, "--json"]).await)).expect("JSON");
    assert!(json.get("lastError").is_none(), "{json}");
}

#[tokio::test(flavor = "multi_thread")]
async fn get_shows_the_last_error_and_masks_secrets() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/secret");
    s.receiver
        .push_replies([Reply::status(400).body("bad input")]);
    let out = check_ok(
        &s.ctl(&[
            "send",
            &url,
            "-H",
            "Authorization: Bearer s3cret",
            "-d",
            "{}",
        ])
        .await,
    );
    let id = row_id(&out);
    s.api()
        .wait_status(&id, &["failed"], WAIT)
        .await
        .expect("failed");

    // The whole delivery: its row, every field, headers (masked), body, then the last error.
    let out = check_ok(&s.ctl(&["get", &id]).await);
    let (_, d) = s.api().get(&id).await.expect("get");
    let time = |field: &str| d[field].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        out,
        row("get", &id, "failed", "1/100", "POST", &url)
            + &format!(
                "  status:         failed\n\
                 \x20 attempts:       1 of 100\n\
                 \x20 created:        {}\n\
                 \x20 updated:        {}\n\
                 \x20 expires:        {}\n\
                 \x20 last response:  HTTP 400\n\
                 headers:\n\
                 \x20 Authorization: [redacted]\n\
                 body: 2 bytes of JSON\n\
                 \x20 {{}}\n\
                 last error: HTTP 400: bad input\n\
                 last error code: http_status\n",
                time("createdAt"),
                time("updatedAt"),
                time("expiresAt")
            )
    );
    let revealed = check_ok(&s.ctl(&["get", &id, "--reveal"]).await);
    assert!(
        revealed.contains("headers:\n  Authorization: Bearer s3cret\n"),
        "{revealed}"
    );
    assert_eq!(check_ok(&s.ctl(&["get", &id, "--body"]).await), "{}");

    let masked: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["get", &id, "--json"]).await)).expect("JSON");
    assert_eq!(masked["headers"]["Authorization"], "[redacted]", "{masked}");
    assert_eq!(masked["lastError"], "HTTP 400: bad input");

    let revealed: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["get", &id, "--reveal", "--json"]).await))
            .expect("JSON");
    assert_eq!(
        revealed["headers"]["Authorization"], "Bearer s3cret",
        "{revealed}"
    );

    let seen = s.receiver.requests();
    assert_eq!(seen[0].header("authorization"), Some("Bearer s3cret"));
}

#[tokio::test(flavor = "multi_thread")]
async fn attempts_table_after_a_retry() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/flaky");
    s.receiver.push_replies([Reply::status(503).body("busy")]);
    let id = row_id(&check_ok(&s.ctl(&["send", &url]).await));
    s.api()
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered on the second attempt");

    let out = check_ok(&s.ctl(&["attempts", &id]).await);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(
        lines[0],
        ["CYCLE", "ATTEMPT", "STARTED", "OUTCOME", "HTTP", "CODE", "DURATION", "ERROR"],
        "{out}"
    );
    // STARTED and DURATION vary; the rest is fixed.
    let fixed = |cells: &[&str]| {
        let mut cells = cells.to_vec();
        cells[2] = "<started>";
        cells[6] = "<duration>";
        cells.join(" ")
    };
    assert_eq!(
        fixed(&lines[1]),
        "1 1 <started> retry 503 http_status <duration> HTTP 503: busy",
        "{out}"
    );
    assert_eq!(
        fixed(&lines[2]),
        "1 2 <started> succeeded 200 - <duration> -",
        "{out}"
    );

    let json: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["attempts", &id, "--json"]).await)).expect("JSON");
    assert_eq!(json["attempts"].as_array().map(Vec::len), Some(2), "{json}");
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_starts_a_new_cycle_only_for_failed_deliveries() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/again");
    s.receiver.push_replies([Reply::status(400)]);
    let id = row_id(&check_ok(&s.ctl(&["send", &url, "-d", "[1]"]).await));
    let api = s.api();
    api.wait_status(&id, &["failed"], WAIT)
        .await
        .expect("failed");

    let out = check_ok(&s.ctl(&["retry", &id]).await);
    assert_eq!(out, row("retry", &id, "pending", "0/100", "POST", &url));
    api.wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered again");
    let seen = s
        .receiver
        .wait_for_requests(2, WAIT)
        .await
        .expect("two requests");
    assert!(seen.iter().all(|r| r.body.as_ref() == b"[1]"));

    let pending = row_id(&check_ok(
        &s.ctl(&["send", &url, "--not-before", FAR_FUTURE]).await,
    ));
    let o = s.ctl(&["retry", &pending]).await;
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "spoolctl: spoold returned HTTP 409 (invalid_transition): this delivery is still \
         pending (its next attempt is scheduled); retry applies only to failed deliveries\n"
    );
    assert_eq!(stdout(&o), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_delivery_is_not_found() {
    let s = Spoold::start().await;
    for args in [
        &["get", "0123456789abcdef0123456789abcdef"][..],
        &["attempts", "0123456789abcdef0123456789abcdef"][..],
        &["cancel", "0123456789abcdef0123456789abcdef"][..],
        &["retry", "0123456789abcdef0123456789abcdef"][..],
        &["checks", "0123456789abcdef0123456789abcdef"][..],
        &[
            "resolve",
            "0123456789abcdef0123456789abcdef",
            "--failed",
            "--note",
            "n",
        ][..],
        &["wait", "0123456789abcdef0123456789abcdef"][..],
        &["get", "not-an-id"][..],
    ] {
        let o = s.ctl(args).await;
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert_eq!(
            stderr(&o),
            "spoolctl: spoold returned HTTP 404 (not_found): delivery not found\n",
            "{args:?}"
        );
        assert_eq!(stdout(&o), "", "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn spoold_url_from_the_environment() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/env");
    let with_env = |args: &[&str]| {
        let mut cmd = spoolctl();
        cmd.args(args).env("SPOOLD_URL", &s.server);
        cmd
    };
    let out = check_ok(&crate::capture(with_env(&["send", &url, "-d", "true"]), None).await);
    let id = row_id(&out);
    assert_eq!(out, row("queued", &id, "pending", "0/100", "POST", &url));
    s.receiver
        .wait_for_requests(1, WAIT)
        .await
        .expect("delivered");

    let o = crate::capture(with_env(&["wait", &id, "--interval", "20ms"]), None).await;
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(
        stdout(&o),
        row("wait", &id, "succeeded", "1/100", "POST", &url)
    );

    // --server wins over the environment.
    let mut cmd = spoolctl();
    cmd.args(["get", &id, "--server", &s.server])
        .env("SPOOLD_URL", "http://127.0.0.1:9");
    let out = check_ok(&crate::capture(cmd, None).await);
    assert!(
        out.starts_with(&row("get", &id, "succeeded", "1/100", "POST", &url)),
        "{out}"
    );
}

/// `stats` and `targets` print the operator's overview as tables, and as JSON with `--json`.
#[tokio::test(flavor = "multi_thread")]
async fn stats_and_targets_give_the_overview() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/overview");
    s.receiver.push_replies([Reply::status(404)]);
    let out = check_ok(&s.ctl(&["send", &url, "-d", "{}"]).await);
    let id = row_id(&out);
    s.api()
        .wait_status(&id, &["failed"], WAIT)
        .await
        .expect("failed");

    let stats = check_ok(&s.ctl(&["stats"]).await);
    let lines: Vec<&str> = stats.lines().collect();
    assert_eq!(
        lines[0],
        "deliveries      canceled 0, failed 1, in_flight 0, manual_review 0, pending 0, \
         succeeded 0, unknown 0",
        "{stats}"
    );
    assert_eq!(
        lines[1],
        "tasks           canceled 0, failed 0, interrupted 0, manual_review 0, pending 0, \
         running 0, succeeded 0, timed_out 0",
        "{stats}"
    );
    assert_eq!(lines[2], "oldest due      nothing pending", "{stats}");
    // The daemon started seconds ago: its windows say they are shorter than their names.
    for (line, window) in [(lines[3], "last 5 minutes"), (lines[4], "last hour")] {
        let (counts, since) = line.split_once(" (").unwrap_or((line, ""));
        assert_eq!(
            counts,
            format!(
                "{window:<16}1 attempts: 0 succeeded, 0 to retry, 1 failed, 0 interrupted, 0 \
                 unknown"
            ),
            "{stats}"
        );
        assert!(
            since.starts_with("since the daemon started, ") && since.ends_with("s ago)"),
            "{stats}"
        );
    }
    assert_eq!(lines[5], "paused targets  0", "{stats}");
    assert!(lines[6].starts_with("database        "), "{stats}");
    let json: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["stats", "--json"]).await)).expect("JSON");
    assert_eq!(json["deliveries"]["failed"], 1, "{json}");

    let targets = check_ok(&s.ctl(&["targets"]).await);
    let origin = format!("http://127.0.0.1:{}", s.receiver.port());
    let lines: Vec<&str> = targets.lines().collect();
    assert_eq!(lines.len(), 2, "{targets}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "TARGET",
            "PENDING",
            "IN_FLIGHT",
            "FAILED_1H",
            "GAVE_UP_1H",
            "CONNECT_FAILS",
            "PAUSE",
            "PAUSED_UNTIL",
            "LAST_ERROR",
            "LAST_FAILURE",
            "LAST_SUCCESS"
        ],
        "{targets}"
    );
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        cells[..9],
        [
            origin.as_str(),
            "0",
            "0",
            "1",
            "1",
            "0",
            "-",
            "-",
            "http_status"
        ],
        "{targets}"
    );
    assert!(
        spool_proto::units::parse_time(cells[9]).is_ok(),
        "{targets}"
    );
    assert_eq!(cells[10], "-", "{targets}");
    // Retried failures count too: an outage shows before anything fails for good.
    s.receiver
        .push_replies([Reply::status(503), Reply::status(503)]);
    let out = check_ok(&s.ctl(&["send", &url, "-d", "{}"]).await);
    s.api()
        .wait_status(&row_id(&out), &["succeeded"], WAIT)
        .await
        .expect("delivered after two 503s");
    let targets = check_ok(&s.ctl(&["targets"]).await);
    let cells: Vec<&str> = targets
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(cells[3..5], ["3", "1"], "{targets}");
    let json: Value =
        serde_json::from_str(&check_ok(&s.ctl(&["targets", "--all", "--json"]).await))
            .expect("JSON");
    assert_eq!(json["targets"][0]["origin"], origin.as_str(), "{json}");
}

/// `--server` pointed at something that is not spoold says so in one line instead of printing
/// that server's page; an address without a scheme is an http:// address.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_is_not_spoold_is_named_as_such() {
    let web = spool_testkit::Receiver::start().await.expect("receiver");
    web.respond_with(
        Reply::status(404)
            .header("Content-Type", "text/html; charset=utf-8")
            .body("<!DOCTYPE html><html><body><h1>Not Found</h1></body></html>"),
    );
    let address = format!("127.0.0.1:{}", web.port());
    let mut cmd = crate::spoolctl();
    cmd.args(["--server", &address, "list"]);
    let o = crate::capture(cmd, None).await;
    crate::check_error(
        &o,
        1,
        &format!("the server at {address} did not answer like spoold (HTTP 404, text/html)"),
    );
}

/// `transitions` prints every status change with its reason.
#[tokio::test(flavor = "multi_thread")]
async fn transitions_table() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/steps");
    let id = row_id(&check_ok(&s.ctl(&["send", &url]).await));
    s.api()
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let out = check_ok(&s.ctl(&["transitions", &id]).await);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["AT", "FROM", "TO", "ATTEMPT", "REASON", "NOTE"],
        "{out}"
    );
    let steps: Vec<&[&str]> = rows[1..].iter().map(|r| &r[1..5]).collect();
    assert_eq!(
        steps,
        [
            &["-", "pending", "0", "created"][..],
            &["pending", "in_flight", "1", "claimed"],
            &["in_flight", "succeeded", "1", "delivered"],
        ],
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn send_wait_on_a_terminal_says_each_attempt_as_it_happens() {
    // Retries a second apart, so the waits between attempts are seen by a 50 ms poll.
    let s = Spoold::start_args(&["--retry-base", "1s", "--retry-cap", "1s"]).await;
    let url = s.receiver.url("/flaky");
    s.receiver
        .push_replies([Reply::status(503).body("busy"), Reply::status(502)]);
    let (code, out) = on_a_terminal(&s, &format!("send {url} --wait --interval 50ms"), &[]).await;
    assert_eq!(code, Some(0), "{out}");
    let said: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("spoolctl: "))
        .map(|l| l.split(" (in ").next().unwrap_or(l))
        .collect();
    // Each change once, in order; the next attempt's time varies.
    let said: Vec<String> = said
        .iter()
        .map(|l| match l.find("next attempt at ") {
            Some(at) => format!("{}next attempt at <time>", &l[..at]),
            None => (*l).to_owned(),
        })
        .collect();
    let wanted = [
        "spoolctl: attempt 1/100 failed: HTTP 503: busy; next attempt at <time>",
        "spoolctl: attempt 2/100 failed: HTTP 502; next attempt at <time>",
    ];
    // The first poll may come before or during the first attempt.
    let from = said
        .iter()
        .position(|l| l == wanted[0])
        .unwrap_or_else(|| panic!("no line for the first failure in {out}"));
    assert!(
        said[..from]
            .iter()
            .all(|l| l.starts_with("spoolctl: pending; first attempt")
                || l.ends_with("is being sent")),
        "{out}"
    );
    let rest: Vec<&String> = said[from..]
        .iter()
        .filter(|l| !l.ends_with("is being sent"))
        .collect();
    assert_eq!(rest, wanted, "{out}");
    assert!(out.contains("wait  "), "the closing row: {out}");
}

/// On a terminal, a delivery sent and delivered at once shows the README's two rows and no
/// line that only repeats them; a first attempt put off shows its countdown.
#[tokio::test(flavor = "multi_thread")]
async fn send_wait_on_a_terminal_adds_a_line_only_when_there_is_news() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/hook");
    let (code, out) = on_a_terminal(&s, &format!("send {url} --wait"), &[]).await;
    assert_eq!(code, Some(0), "{out}");
    // An attempt seen in flight by a poll is news; nothing else is.
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| !l.ends_with("is being sent"))
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("queued  "), "{out}");
    assert!(lines[1].starts_with("wait  "), "{out}");

    let (code, out) = on_a_terminal(&s, &format!("send {url} --not-before 2s --wait"), &[]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("spoolctl: pending; first attempt at ") && l.contains(" (in ")),
        "{out}"
    );
}

/// A `list` table with each row's cells separated by one space, and ages (`now`, `3s ago`) as
/// `<age>`.
pub fn ages(table: &str) -> String {
    let mut out = String::new();
    for line in table.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut cells = Vec::new();
        let mut i = 0;
        while i < words.len() {
            if words[i] == "now" {
                cells.push("<age>");
            } else if words.get(i + 1) == Some(&"ago") {
                cells.push("<age>");
                i += 1;
            } else {
                cells.push(words[i]);
            }
            i += 1;
        }
        out.push_str(&cells.join(" "));
        out.push('\n');
    }
    out
}

/// `spoolctl ARGS --server …` run by `script`, which gives it a pseudo-terminal for stdout and
/// stderr, with `env` set: its exit code and what the terminal showed (stdout and stderr
/// together, line ends as `\n`).
async fn on_a_terminal(s: &Spoold, args: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let line = format!(
        "{} {args} --server {}",
        env!("CARGO_BIN_EXE_spoolctl"),
        s.server
    );
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .envs(env.iter().copied());
    let o = tokio::time::timeout(WAIT, crate::capture(cmd, None))
        .await
        .expect("spoolctl ends");
    (o.status.code(), stdout(&o).replace('\r', ""))
}

#[tokio::test(flavor = "multi_thread")]
async fn statuses_are_coloured_on_a_terminal_unless_no_color() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/c");
    let id = row_id(&check_ok(&s.ctl(&["send", &url]).await));
    s.api()
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let green = "\u{1b}[32msucceeded\u{1b}[0m";

    let (code, out) = on_a_terminal(&s, "list", &[]).await;
    assert_eq!(code, Some(0), "{out}");
    // The padding stays outside the colour: the columns line up as without it.
    assert!(out.contains(&format!("{id}  {green}  1/100 ")), "{out:?}");
    let (_, out) = on_a_terminal(&s, &format!("get {id}"), &[]).await;
    assert!(out.starts_with(&format!("get  {id}  {green}  ")), "{out:?}");

    for env in [("NO_COLOR", "1"), ("TERM", "dumb")] {
        let (code, out) = on_a_terminal(&s, "list", &[env]).await;
        assert_eq!(code, Some(0), "{out}");
        assert!(!out.contains('\u{1b}'), "{env:?}: {out:?}");
        assert!(out.contains(&format!("{id}  succeeded  1/100")), "{out:?}");
    }
    // Not a terminal: never colour.
    let out = check_ok(&s.ctl(&["list"]).await);
    assert!(!out.contains('\u{1b}'), "{out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn targets_pause_and_resume_by_hand() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/maintenance");
    let origin = format!("http://127.0.0.1:{}", s.receiver.port());
    assert_eq!(
        check_ok(&s.ctl(&["targets", "pause", &url]).await),
        format!("paused  {origin}\n")
    );
    let id = row_id(&check_ok(&s.ctl(&["send", &url, "-d", "{}"]).await));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(s.receiver.requests().is_empty(), "sent while paused");
    let targets = check_ok(&s.ctl(&["targets"]).await);
    let row: Vec<&str> = targets
        .lines()
        .find(|l| l.starts_with(&origin))
        .unwrap_or_else(|| panic!("{targets}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        row[1..8],
        ["1", "0", "0", "0", "0", "operator", "resume"],
        "{targets}"
    );
    assert_eq!(
        check_ok(&s.ctl(&["targets", "resume", &origin]).await),
        format!("resumed  {origin}\n")
    );
    let o = s.ctl(&["wait", &id]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = s.ctl(&["targets", "pause", "ftp://x"]).await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "spoolctl: spoold returned HTTP 400 (invalid_request): target \"ftp://x\" is not an \
         http:// or https:// URL with a host name or IPv4 address (e.g. \
         https://hooks.example.com)\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_and_cancel_by_filter_count_first_and_ask() {
    let s = Spoold::start().await;
    let api = s.api();
    let url = s.receiver.url("/bulk");
    s.receiver
        .push_replies([Reply::status(400), Reply::status(400), Reply::status(400)]);
    let mut failed = Vec::new();
    for n in 0..3 {
        let id = row_id(&check_ok(
            &s.ctl(&["send", &url, "-d", &format!("[{n}]")]).await,
        ));
        api.wait_status(&id, &["failed"], WAIT)
            .await
            .expect("failed");
        failed.push(id);
    }
    let waiting = row_id(&check_ok(
        &s.ctl(&["send", &url, "--not-before", FAR_FUTURE]).await,
    ));

    // Counted, not changed.
    let out = check_ok(&s.ctl(&["retry", "--target", &url, "--dry-run"]).await);
    assert_eq!(
        out,
        format!(
            "would retry 3 of 4 matching deliveries (1 skipped: retry does not apply to \
             them)\nfirst: {}\n",
            failed.join(" ")
        )
    );
    let (_, d) = api.get(&failed[0]).await.expect("get");
    assert_eq!(d["status"], "failed");
    let out = check_ok(
        &s.ctl(&[
            "retry",
            "--error-code",
            "http_status",
            "--since",
            "1h",
            "--dry-run",
            "--json",
        ])
        .await,
    );
    let counted: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        (&counted["matched"], &counted["changed"], &counted["dryRun"]),
        (
            &serde_json::json!(3),
            &serde_json::json!(3),
            &serde_json::json!(true)
        ),
        "{counted}"
    );

    // Not on a terminal, a bulk change needs --yes.
    let o = s.ctl(&["retry", "--status", "failed"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("needs --yes when not run on a terminal"),
        "{}",
        stderr(&o)
    );
    let out = check_ok(&s.ctl(&["retry", "--status", "failed", "--yes"]).await);
    assert_eq!(
        out,
        format!(
            "retried 3 of 3 matching deliveries\nfirst: {}\n",
            failed.join(" ")
        )
    );
    for id in &failed {
        api.wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered on the new cycle");
    }

    // On a terminal it asks; only yes goes ahead.
    let (code, shown) =
        on_a_terminal_answering(&s, "cancel --status pending --target", &url, b"n\n").await;
    assert_eq!(code, Some(1), "{shown}");
    assert!(
        shown.contains("cancel 1 deliveries (1 match, 0 skipped)? [y/N]")
            && shown.contains("not confirmed; nothing was changed"),
        "{shown}"
    );
    let (_, d) = api.get(&waiting).await.expect("get");
    assert_eq!(d["status"], "pending");
    let (code, shown) =
        on_a_terminal_answering(&s, "cancel --status pending --target", &url, b"y\n").await;
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.contains(&format!(
            "canceled 1 of 1 matching deliveries\nfirst: {waiting}"
        )),
        "{shown}"
    );

    // Several IDs: each one's row, and each refusal reported without stopping the others.
    let mut later = Vec::new();
    for _ in 0..2 {
        later.push(row_id(&check_ok(
            &s.ctl(&["send", &url, "--not-before", FAR_FUTURE]).await,
        )));
    }
    let o = s.ctl(&["cancel", &later[0], &failed[0], &later[1]]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{}{}",
            row("cancel", &later[0], "canceled", "0/100", "POST", &url),
            row("cancel", &later[1], "canceled", "0/100", "POST", &url)
        )
    );
    assert_eq!(
        stderr(&o),
        format!(
            "spoolctl: {}: spoold returned HTTP 409 (invalid_transition): this delivery already \
             succeeded; cancel applies only to pending and in_flight deliveries\nspoolctl: 1 of \
             3 deliveries could not cancel\n",
            failed[0]
        )
    );

    // IDs or a filter, one of them.
    for args in [
        &["retry"][..],
        &["retry", &failed[0], "--status", "failed"][..],
        &["retry", &failed[0], "--yes"][..],
        &["retry", "--status", "failed", "--dry-run", "--yes"][..],
        &["retry", "--since", "yesterday", "--dry-run"][..],
    ] {
        let o = s.ctl(args).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

/// Like [`on_a_terminal`], with `answer` typed on the terminal and `url` as the last argument.
async fn on_a_terminal_answering(
    s: &Spoold,
    args: &str,
    url: &str,
    answer: &[u8],
) -> (Option<i32>, String) {
    let line = format!(
        "{} {args} {url} --server {}",
        env!("CARGO_BIN_EXE_spoolctl"),
        s.server
    );
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"]).env("NO_COLOR", "1");
    let o = tokio::time::timeout(WAIT, crate::capture(cmd, Some(answer)))
        .await
        .expect("spoolctl ends");
    (o.status.code(), stdout(&o).replace('\r', ""))
}

#[tokio::test(flavor = "multi_thread")]
async fn export_to_a_file_and_import_into_another_daemon() {
    let a = Spoold::start().await;
    let url = a.receiver.url("/moved");
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(row_id(&check_ok(
            &a.ctl(&[
                "send",
                &url,
                "-d",
                &format!("{{\"n\":{n}}}"),
                "--not-before",
                FAR_FUTURE,
            ])
            .await,
        )));
    }
    let file = a.dir.path().join("spool.ndjson");
    let file_arg = file.display().to_string();
    let o = a
        .ctl(&["export", "--status", "pending", "-o", &file_arg])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stderr(&o), "spoolctl: exported 3 deliveries\n");
    let text = std::fs::read_to_string(&file).expect("the export");
    assert_eq!(text.lines().count(), 3, "{text}");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
    assert_eq!(mode & 0o077, 0, "not readable by others: {mode:o}");

    let b = Spoold::start().await;
    let out = check_ok(&b.ctl(&["import", &file_arg]).await);
    assert_eq!(out, "imported 3, already there 0, conflicts 0, invalid 0\n");
    let out = check_ok(&b.ctl(&["list", "--status", "pending", "--json"]).await);
    let listed: Value = serde_json::from_str(&out).expect("JSON");
    let mut got: Vec<String> = listed["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    got.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(got, want);
    // Again, from standard input with a torn last line: nothing new, the tear reported.
    let cut = &text[..text.len() - 10];
    let o = b.ctl_stdin(&["import", "-"], cut.as_bytes()).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "imported 0, already there 2, conflicts 0, invalid 0, torn last line skipped\n"
    );
    assert!(
        stderr(&o).contains("line 3: the last line is torn"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spoold_journal_brings_its_pending_deliveries() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/from-go");
    // v0.1.0's digest of the create (its recipe: method, URL, maxAttempts, the headers, then
    // the body as the client sent it).
    let hash: String = {
        use sha2::Digest as _;
        let create = format!("POST\n{url}\n8\nX-Trace:t-1\n{{\"a\": [1, 2]}}");
        sha2::Sha256::digest(create.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let line = |id: &str, status: &str, extra: &str| {
        format!(
            "{{\"version\":2,\"delivery\":{{\"id\":\"{id}\",\"targetUrl\":\"{url}\",\
             \"method\":\"POST\",\"headers\":{{\"X-Trace\":\"t-1\"}},\"body\":{{\"a\": [1, 2]}},\
             \"status\":\"{status}\",\"attempts\":1,\"maxAttempts\":8,\
             \"createdAt\":\"2026-11-30T10:00:00.123456789Z\",\
             \"updatedAt\":\"2026-11-30T10:00:01Z\"{extra}}},\"requestHash\":\"{hash}\"}}\n"
        )
    };
    let pending = "a".repeat(32);
    let in_flight = "b".repeat(32);
    let finished = "c".repeat(32);
    let removed = "d".repeat(32);
    let journal = [
        line(&pending, "in_flight", ""),
        line(&pending, "pending", ",\"idempotencyKey\":\"job-7\""),
        line(
            &in_flight,
            "in_flight",
            ",\"leaseUntil\":\"2026-11-30T10:00:30Z\"",
        ),
        line(&finished, "succeeded", ""),
        line(&removed, "pending", ""),
        format!("{{\"version\":2,\"deletedId\":\"{removed}\"}}\n"),
        "{\"version\":2,\"delivery\":{\"id\":\"ee".to_owned(),
    ]
    .concat();
    let file = s.dir.path().join("spoold.journal");
    std::fs::write(&file, journal).expect("write the journal");
    let file_arg = file.display().to_string();
    let o = s.ctl(&["import", "--spoold-journal", &file_arg]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "imported 2, already there 0, conflicts 0, invalid 0, finished more than 168h ago and \
         left out 1, torn last line skipped\n"
    );
    let api = s.api();
    for id in [&pending, &in_flight] {
        api.wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered");
    }
    let seen = s.receiver.requests();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|r| r.body.as_ref() == br#"{"a": [1, 2]}"# && r.header("x-trace") == Some("t-1")),
        "the body byte for byte, the headers kept"
    );
    // The key came along: the same create from the old client finds it.
    let o = s
        .ctl(&[
            "send",
            &url,
            "-H",
            "X-Trace: t-1",
            "-d",
            r#"{"a": [1, 2]}"#,
            "--idempotency-key",
            "job-7",
            "--max-attempts",
            "8",
        ])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&format!("existing  {pending}")),
        "{}",
        stdout(&o)
    );
}

/// `docs/man/spoolctl.1` is what `spoolctl man` prints (regenerate with UPDATE_SNAPSHOTS=1).
#[test]
fn the_committed_manual_page_is_current() {
    let page = committed_output_is_current(&["man"], "docs/man/spoolctl.1", "manual");
    assert!(
        page.contains(".TH spoolctl 1") && page.contains("export"),
        "{page}"
    );
}

/// The completion scripts the package installs are what `spoolctl completion SHELL` prints
/// (regenerate with UPDATE_SNAPSHOTS=1).
#[test]
fn the_committed_completions_are_current() {
    for (shell, file, says) in [
        ("bash", "spoolctl.bash", "complete -F _spoolctl"),
        ("zsh", "_spoolctl", "#compdef spoolctl"),
        ("fish", "spoolctl.fish", "complete -c spoolctl"),
    ] {
        let script = committed_output_is_current(
            &["completion", shell],
            &format!("deploy/completions/{file}"),
            "completions",
        );
        assert!(script.contains(says), "{shell}: {script}");
        assert!(script.contains("export"), "{shell}: every command is in it");
    }
}

/// Run spoolctl with `args` and compare its output with the committed file `path` (relative to
/// the workspace), writing it first when UPDATE_SNAPSHOTS is set. Returns the output.
fn committed_output_is_current(args: &[&str], path: &str, filter: &str) -> String {
    let o = spoolctl().args(args).output().expect("spoolctl runs");
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let committed = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&committed, &o.stdout).expect("write the snapshot");
    }
    assert_eq!(
        std::fs::read(&committed).unwrap_or_default(),
        o.stdout,
        "{path} is stale; regenerate with UPDATE_SNAPSHOTS=1 cargo nextest run -p spoolctl {filter}"
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An empty or inverted time range matches nothing, so an action on it would report 0 and
/// succeed: it is refused as a usage error naming both times, before spoold is asked.
#[test]
fn an_empty_time_range_is_refused_naming_both_times() {
    for args in [
        ["retry", "--since", "1h", "--until", "2h"],
        ["cancel", "--since", "2h", "--until", "2h"],
        [
            "export",
            "--since",
            "2026-12-01T00:00:00Z",
            "--until",
            "2026-11-01T00:00:00Z",
        ],
    ] {
        // Nothing listens there: the refusal comes first.
        let o = run(&[&args[..], &["--server", "http://127.0.0.1:9"]].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.starts_with(&format!("spoolctl: --since {} (", args[2]))
                && err.contains(&format!(") is not before --until {} (", args[4]))
                && err.contains("the range is empty"),
            "{args:?}: {err}"
        );
    }
}

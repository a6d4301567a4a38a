//! Per-target rates (`[[targets]] rate = "N/s"`) against a real spoold and real receivers: the
//! limited target gets its requests evenly spaced at the rate, no attempt is spent on holding a
//! delivery back, another target's deliveries are not delayed by the limited one's backlog,
//! and a target waiting for its next token costs no work (no commits) meanwhile.

use std::time::{Duration, Instant};

use serde_json::json;
use spool_testkit::{Api, DaemonProcess, Receiver};
use tempfile::TempDir;

use crate::{commits, id_of, process_opts, WAIT};

/// A daemon whose config limits `limited`'s origin to `rate` (burst 1).
async fn daemon(dir: &TempDir, limited: &Receiver, rate: &str) -> (DaemonProcess, Api) {
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        format!(
            "[[targets]]\nmatch = \"{}\"\nrate = \"{rate}\"\n",
            limited.url("/*")
        ),
    )
    .expect("write config");
    let opts = process_opts(dir).args(["--config".to_owned(), config.display().to_string()]);
    let daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    (daemon, api)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_spaces_requests_spends_no_attempt_and_delays_no_other_target() {
    let dir = TempDir::new().expect("temp dir");
    let limited = Receiver::start().await.expect("receiver");
    let other = Receiver::start().await.expect("receiver");
    let (_daemon, api) = daemon(&dir, &limited, "20/s").await;
    const N: usize = 60;
    let mut ids = Vec::new();
    for i in 0..N {
        let (status, created) = api
            .create(json!({"targetUrl": limited.url(&format!("/{i}"))}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
        ids.push(id_of(&created));
    }
    // Another target's delivery, sent while the limited one has a backlog: at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    let (_, quick) = api
        .create(json!({"targetUrl": other.url("/quick")}))
        .await
        .expect("create");
    api.wait_status(&id_of(&quick), &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let took = asked.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "another target waited {took:?}"
    );

    for id in &ids {
        let d = api
            .wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered");
        // Held back, never charged: one attempt each, none interrupted.
        assert_eq!(d["attempts"], 1, "{d}");
        assert!(d["interruptedAttempts"].is_null(), "{d}");
    }
    let mut at: Vec<Instant> = limited.requests().iter().map(|r| r.received_at).collect();
    assert_eq!(at.len(), N);
    at.sort();
    // 20/s with a burst of 1: 60 requests span at least 59 intervals of 50 ms (less a little
    // for the timer), and no second holds more than 21.
    let span = at[N - 1] - at[0];
    assert!(
        span >= Duration::from_millis(2_800),
        "{N} requests in {span:?}"
    );
    assert!(
        span <= Duration::from_millis(6_000),
        "{N} requests in {span:?}: too slow"
    );
    for (i, first) in at.iter().enumerate() {
        let within = at[i..]
            .iter()
            .take_while(|t| **t - *first < Duration::from_secs(1))
            .count();
        assert!(within <= 21, "{within} requests within a second from #{i}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_waiting_for_its_next_token_costs_nothing() {
    let dir = TempDir::new().expect("temp dir");
    let limited = Receiver::start().await.expect("receiver");
    let (daemon, api) = daemon(&dir, &limited, "1/h").await;
    for i in 0..50 {
        let (status, _) = api
            .create(json!({"targetUrl": limited.url(&format!("/{i}"))}))
            .await
            .expect("create");
        assert_eq!(status, 201);
    }
    limited
        .wait_for_requests(1, WAIT)
        .await
        .expect("the first goes at once");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = commits(&api).await;
    let cpu = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .expect("fields")
            .split_whitespace()
            .collect();
        // utime and stime, fields 14 and 15 of stat (12 and 13 after the command).
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
    };
    let cpu_before = cpu(daemon.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ticks = cpu(daemon.pid()) - cpu_before;
    let after = commits(&api).await;
    assert_eq!(limited.requests().len(), 1, "one token an hour");
    // A sweep may renew or expire in that time; claims for a target without a token would be
    // one commit each, many a second.
    assert!(
        after - before <= 1.0,
        "{} commits while waiting",
        after - before
    );
    assert!(
        ticks <= 20,
        "{ticks} clock ticks of CPU in 2 s while waiting"
    );
    let (_, pending) = api.list("status=pending&limit=100").await.expect("list");
    assert_eq!(pending["count"], 49, "{pending}");
}

/// Rates are per origin: a rate on a rule that matches only part of an origin
/// (`http://host/slow/*`) held back the origin's other paths too (a delivery to `/fast`
/// created behind 40 waiting `/slow/` ones arrived 4.4 s later). Such a rule is refused at
/// start, saying so; rules that match whole origins are taken.
#[tokio::test(flavor = "multi_thread")]
async fn a_rate_on_part_of_an_origin_is_refused_at_start() {
    for (pattern, refused) in [
        ("http://127.0.0.1:8080/slow/*", true),
        ("http://127.0.0.1:8080/hook", true),
        ("http://127.0.0.1:8080/", true),
        ("http://127.0.0.1:*/slow*", true),
        ("http://127.0.0.1:8080/*", false),
        ("http://127.0.0.1:*/*", false),
        ("https://*.example.com/*", false),
        ("http://127.0.0.1:*", false),
    ] {
        let dir = TempDir::new().expect("temp dir");
        let config = dir.path().join("spoold.toml");
        std::fs::write(
            &config,
            format!("[[targets]]\nmatch = \"{pattern}\"\nrate = \"8/s\"\n"),
        )
        .expect("write config");
        let opts = process_opts(&dir).args(["--config".to_owned(), config.display().to_string()]);
        if refused {
            let (status, stderr) = DaemonProcess::run_to_exit(opts).await.expect("exits");
            assert_eq!(status.code(), Some(2), "{pattern}: {stderr}");
            assert!(
                stderr.contains(&format!("match = {pattern:?}"))
                    && stderr.contains("rates are per origin"),
                "{pattern}: {stderr}"
            );
        } else {
            let daemon = DaemonProcess::start(opts)
                .await
                .unwrap_or_else(|e| panic!("{pattern}: {e}"));
            drop(daemon);
        }
    }
}

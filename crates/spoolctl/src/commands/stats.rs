//! `spoolctl stats`: how the spool is doing, one fact per line.

use std::collections::BTreeMap;
use std::time::Duration;

use spool_proto::{units, ActivityView, StatsView};

use crate::client::Client;
use crate::commands::Exit;
use crate::output::{Output, Table};

pub async fn run(client: &Client, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let stats = client.stats().await?;
    if out.is_json() {
        out.json(&stats)?;
    } else {
        out.table(&table(&stats))?;
    }
    Ok(Exit::Success)
}

fn table(s: &StatsView) -> Table {
    table_at(s, crate::output::now_ms())
}

/// The table as of `now` (Unix milliseconds).
fn table_at(s: &StatsView, now: i64) -> Table {
    let mut t = Table::new();
    t.row(["deliveries".to_owned(), by_status(&s.deliveries)]);
    // A daemon from before tasks were counted here sends none.
    if !s.tasks.is_empty() {
        t.row(["tasks".to_owned(), by_status(&s.tasks)]);
    }
    t.row([
        "oldest due".to_owned(),
        match (&s.oldest_due_at, &s.oldest_due_age) {
            (Some(at), Some(age)) => format!("{at} (waiting {age})"),
            // Pending but not due: each waits for its retry's backoff or its notBefore.
            _ => match s.deliveries.get("pending").copied().unwrap_or(0) {
                0 => "nothing pending".to_owned(),
                n => format!("none due now ({n} pending wait for a retry or their notBefore)"),
            },
        },
    ]);
    // The windows are the daemon's memory: a younger daemon has seen less than their length.
    let up = s
        .started_at
        .as_deref()
        .and_then(|at| units::parse_time(at).ok())
        .map(|at| Duration::from_millis(u64::try_from(now - at).unwrap_or(0)));
    for (name, window, length) in [
        ("last 5 minutes", &s.last_five_minutes, 5 * 60),
        ("last hour", &s.last_hour, 60 * 60),
    ] {
        let mut line = activity(window);
        if let Some(up) = up.filter(|up| up.as_secs() < length) {
            let up = Duration::from_secs(up.as_secs());
            line.push_str(&format!(
                " (since the daemon started, {} ago)",
                units::format_duration(up)
            ));
        }
        t.row([name.to_owned(), line]);
    }
    t.row(["paused targets".to_owned(), s.paused_targets.to_string()]);
    t.row([
        "database".to_owned(),
        match s.max_database_bytes {
            Some(max) => format!("{} of {} allowed", size(s.database_bytes), size(max)),
            None => size(s.database_bytes),
        },
    ]);
    t
}

/// `canceled 0, failed 1, …`
fn by_status(counts: &BTreeMap<String, u64>) -> String {
    let counts: Vec<String> = counts
        .iter()
        .map(|(status, n)| format!("{status} {n}"))
        .collect();
    counts.join(", ")
}

fn activity(a: &ActivityView) -> String {
    format!(
        "{} attempts: {} succeeded, {} to retry, {} failed, {} interrupted, {} unknown",
        a.attempts,
        a.succeeded,
        a.retryable_failures,
        a.terminal_failures,
        a.interrupted,
        a.unknown
    )
}

/// Bytes in the largest binary unit that keeps a digit before the point.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64;
    let mut unit = "bytes";
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    format!("{value:.1} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_longer_than_the_daemon_has_run_say_so() {
        let stats = |started_at: Option<&str>| -> StatsView {
            let mut v = serde_json::json!({
                "deliveries": {"pending": 0}, "tasks": {},
                "lastFiveMinutes": {"attempts": 4, "succeeded": 1, "retryableFailures": 3,
                                    "terminalFailures": 0, "interrupted": 0},
                "lastHour": {"attempts": 4, "succeeded": 1, "retryableFailures": 3,
                             "terminalFailures": 0, "interrupted": 0},
                "pausedTargets": 0, "databaseBytes": 4096,
            });
            if let Some(at) = started_at {
                v["startedAt"] = at.into();
            }
            serde_json::from_value(v).expect("stats")
        };
        let now = units::parse_time("2026-12-01T10:00:00.000Z").expect("a time");
        let windows = |s: &StatsView| -> Vec<String> {
            table_at(s, now)
                .render()
                .lines()
                .filter(|l| l.starts_with("last "))
                .map(|l| {
                    l.split_once(" unknown")
                        .map_or(l, |(_, rest)| rest)
                        .to_owned()
                })
                .collect()
        };
        let check = |started_at: Option<&str>, expected: [&str; 2]| {
            assert_eq!(windows(&stats(started_at)), expected, "{started_at:?}");
        };
        // Started 2m30.5s ago: both windows are since then.
        check(
            Some("2026-12-01T09:57:29.500Z"),
            [
                " (since the daemon started, 2m30s ago)",
                " (since the daemon started, 2m30s ago)",
            ],
        );
        // 20 minutes ago: the hour only.
        check(
            Some("2026-12-01T09:40:00.000Z"),
            ["", " (since the daemon started, 20m ago)"],
        );
        check(Some("2026-12-01T08:00:00.000Z"), ["", ""]);
        // A daemon that does not say.
        check(None, ["", ""]);
    }

    #[test]
    fn sizes_read_like_sizes() {
        assert_eq!(size(0), "0 bytes");
        assert_eq!(size(1023), "1023 bytes");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(1 << 30), "1.0 GiB");
    }
}

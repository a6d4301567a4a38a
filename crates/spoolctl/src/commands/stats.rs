//! `spoolctl stats`: how the spool is doing, one fact per line.

use std::collections::BTreeMap;

use spool_proto::{ActivityView, StatsView};

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
    t.row(["last 5 minutes".to_owned(), activity(&s.last_five_minutes)]);
    t.row(["last hour".to_owned(), activity(&s.last_hour)]);
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
    fn sizes_read_like_sizes() {
        assert_eq!(size(0), "0 bytes");
        assert_eq!(size(1023), "1023 bytes");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(1 << 30), "1.0 GiB");
    }
}

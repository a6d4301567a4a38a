//! Prometheus metrics. spoold v0.1.0's names are kept; ours are added. No label takes an
//! unbounded value (no ids, no URLs, no hosts). The registry is owned here, not global.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use spool_store::model::{DeliveryStatus, Stats};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    pub task_type: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskEndLabel {
    pub task_type: String,
    pub status: &'static str,
    /// A stable error code, or `none`.
    pub error_code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OriginLabel {
    pub origin: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskWaitLabel {
    pub task_type: String,
    /// `lock` or `quota`.
    pub reason: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric the daemon exports.
pub struct Metrics {
    registry: Registry,
    pub deliveries: Family<StatusLabel, Gauge>,
    pub attempts: Counter,
    pub results: Family<ResultLabel, Counter>,
    pub attempt_duration: HistogramFamily<OutcomeLabel>,
    pub db_bytes: Gauge,
    pub db_max_bytes: Gauge,
    pub oldest_due_age: Gauge<f64, AtomicU64>,
    pub commit_duration: Histogram,
    pub commit_batch: Histogram,
    pub commit_failures: Counter,
    pub duplicates: Counter,
    pub conflicts: Counter,
    pub blocked: Counter,
    pub admission_rejections: Counter,
    pub expired: Counter,
    pub undone: Counter,
    /// Deliveries given back unsent because their target's rate allowed none just then.
    pub rate_limited: Counter,
    /// URLs that answered 410 Gone and wait for an operator.
    pub gone_targets: Gauge,
    /// The same by origin (the URLs themselves are not labels: a webhook's path is often its
    /// secret).
    pub gone_urls: Family<OriginLabel, Gauge>,
    /// Drops taken in from the maildrop.
    pub maildrop_picked_up: Counter,
    /// Drops refused (moved aside), by why.
    pub maildrop_refused: Family<CodeLabel, Counter>,
    /// Drops waiting in the maildrop after the last pass.
    pub maildrop_waiting: Gauge,
    /// At-least-once attempts to be sent again though a redirect had answered them.
    pub resent_after_redirect: Counter,
    pub pruned: Counter,
    pub allow_private_targets: Gauge,
    pub allowed_target_ranges: Gauge,
    pub max_redirects: Gauge,
    pub ready: Gauge,
    pub paused_targets: Gauge,
    pub reconcile_checks: Family<ResultLabel, Counter>,
    pub unknown_duration: Histogram,
    pub tasks: Family<StatusLabel, Gauge>,
    pub task_submissions: Family<TypeLabel, Counter>,
    pub task_duplicates: Family<TypeLabel, Counter>,
    pub tasks_finished: Family<TaskEndLabel, Counter>,
    pub task_retries: Family<TypeLabel, Counter>,
    pub task_attempt_duration: HistogramFamily<TypeLabel>,
    pub task_queue_wait: HistogramFamily<TypeLabel>,
    pub task_recovered_processes: Counter,
    pub task_waits: Family<TaskWaitLabel, Counter>,
    pub task_output_truncated_bytes: Family<TypeLabel, Counter>,
    pub task_redactions: Family<TypeLabel, Counter>,
    /// Attempts' results held because the database was out of reach, not yet recorded.
    pub unrecorded: Family<KindLabel, Gauge>,
    /// PostgreSQL: its standbys streaming, by mode (registered with PostgreSQL only).
    pub db_standbys: Family<ModeLabel, Gauge>,
    /// PostgreSQL: 1 when its replication does not promise that an acknowledged write survives
    /// a failover, or makes commits wait.
    pub db_replication_risk: Gauge,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    /// `synchronous` or `asynchronous`.
    pub mode: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `delivery` or `task`.
    pub kind: &'static str,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// 10 ms to about 11 h.
fn task_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 22))
}

fn attempt_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// The settings the `spoold_config_*` and `spoold_journal_max_bytes` gauges show.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// The store is PostgreSQL: its replication has gauges.
    pub postgres: bool,
    pub max_db_bytes: u64,
    pub allow_private_targets: bool,
    pub allowed_target_ranges: usize,
    pub max_redirects: u32,
}

impl Metrics {
    pub fn new(settings: Settings) -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            deliveries: Family::default(),
            attempts: Counter::default(),
            results: Family::default(),
            attempt_duration: Family::new_with_constructor(attempt_histogram),
            db_bytes: Gauge::default(),
            db_max_bytes: Gauge::default(),
            oldest_due_age: Gauge::default(),
            commit_duration: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            commit_batch: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            commit_failures: Counter::default(),
            duplicates: Counter::default(),
            conflicts: Counter::default(),
            blocked: Counter::default(),
            admission_rejections: Counter::default(),
            expired: Counter::default(),
            undone: Counter::default(),
            rate_limited: Counter::default(),
            gone_targets: Gauge::default(),
            gone_urls: Family::default(),
            maildrop_picked_up: Counter::default(),
            maildrop_refused: Family::default(),
            maildrop_waiting: Gauge::default(),
            resent_after_redirect: Counter::default(),
            pruned: Counter::default(),
            allow_private_targets: Gauge::default(),
            allowed_target_ranges: Gauge::default(),
            max_redirects: Gauge::default(),
            ready: Gauge::default(),
            paused_targets: Gauge::default(),
            reconcile_checks: Family::default(),
            // 1 s to about 9 h.
            unknown_duration: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            tasks: Family::default(),
            task_submissions: Family::default(),
            task_duplicates: Family::default(),
            tasks_finished: Family::default(),
            task_retries: Family::default(),
            task_attempt_duration: Family::new_with_constructor(task_histogram),
            task_queue_wait: Family::new_with_constructor(task_histogram),
            task_recovered_processes: Counter::default(),
            task_waits: Family::default(),
            task_output_truncated_bytes: Family::default(),
            task_redactions: Family::default(),
            unrecorded: Family::default(),
            db_standbys: Family::default(),
            db_replication_risk: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "spoold_deliveries",
            "Current deliveries by status",
            m.deliveries.clone(),
        );
        registry.register(
            "spoold_delivery_attempts",
            "Outbound delivery attempts",
            m.attempts.clone(),
        );
        registry.register(
            "spoold_delivery_results",
            "Recorded delivery results",
            m.results.clone(),
        );
        registry.register(
            "spoold_attempt_duration_seconds",
            "Duration of delivery attempts by outcome",
            m.attempt_duration.clone(),
        );
        registry.register(
            "spoold_journal_size_bytes",
            "Bytes used by the database (spoold v0.1.0 name)",
            m.db_bytes.clone(),
        );
        registry.register(
            "spoold_journal_max_bytes",
            "Configured admission limit in bytes; zero is unlimited",
            m.db_max_bytes.clone(),
        );
        registry.register(
            "spoold_oldest_due_age_seconds",
            "How long the oldest due pending delivery has been waiting; 0 if none",
            m.oldest_due_age.clone(),
        );
        registry.register(
            "spoold_store_commit_duration_seconds",
            "Duration of store commits (one per group of writes)",
            m.commit_duration.clone(),
        );
        registry.register(
            "spoold_store_commit_batch_size",
            "Writes carried by one store commit",
            m.commit_batch.clone(),
        );
        registry.register(
            "spoold_store_commit_failures",
            "Store commits that failed",
            m.commit_failures.clone(),
        );
        registry.register(
            "spoold_idempotent_duplicates",
            "Creates answered with an existing delivery for the same idempotency key",
            m.duplicates.clone(),
        );
        registry.register(
            "spoold_idempotency_conflicts",
            "Creates refused because the idempotency key was used for a different request",
            m.conflicts.clone(),
        );
        registry.register(
            "spoold_blocked_targets",
            "Deliveries refused or failed because the target address is blocked",
            m.blocked.clone(),
        );
        registry.register(
            "spoold_delivery_rate_limited",
            "Deliveries given back unsent (no attempt spent) because their target's rate \
             allowed none just then",
            m.rate_limited.clone(),
        );
        registry.register(
            "spoold_gone_targets",
            "URLs that answered 410 Gone: nothing is sent to them until an operator resumes \
             them (alert on > 0; spoolctl targets lists them)",
            m.gone_targets.clone(),
        );
        registry.register(
            "spoold_gone_urls",
            "URLs that answered 410 Gone, by origin",
            m.gone_urls.clone(),
        );
        registry.register(
            "spoold_maildrop_picked_up",
            "Drops taken in from the maildrop (sends made while the daemon could not be reached)",
            m.maildrop_picked_up.clone(),
        );
        registry.register(
            "spoold_maildrop_refused",
            "Drops the daemon would not take, moved aside into the maildrop's refused/ (alert on \
             an increase: a job's request was dropped and then refused)",
            m.maildrop_refused.clone(),
        );
        registry.register(
            "spoold_maildrop_waiting",
            "Drops waiting in the maildrop after the last pickup pass",
            m.maildrop_waiting.clone(),
        );
        registry.register(
            "spoold_admission_rejections",
            "Creates refused because the database is over its admission limit",
            m.admission_rejections.clone(),
        );
        registry.register(
            "spoold_expired_deliveries",
            "Deliveries failed because expiresAt passed before an attempt could start",
            m.expired.clone(),
        );
        registry.register(
            "spoold_delivery_attempts_undone",
            "Attempts started ahead of their turn and undone unsent (target stopped answering, \
             shutdown, or started too long ago)",
            m.undone.clone(),
        );
        registry.register(
            "spoold_delivery_resent_after_redirect",
            "At-least-once attempts retried though a hop had answered with a redirect that was \
             followed: the request had reached the target, and is sent again from its first hop",
            m.resent_after_redirect.clone(),
        );
        registry.register(
            "spoold_journal_pruned_deliveries",
            "Terminal deliveries removed by retention",
            m.pruned.clone(),
        );
        registry.register(
            "spoold_config_allow_private_targets",
            "1 if --allow-private-targets is set",
            m.allow_private_targets.clone(),
        );
        registry.register(
            "spoold_config_allowed_target_ranges",
            "Networks opened with --allow-target",
            m.allowed_target_ranges.clone(),
        );
        registry.register(
            "spoold_config_max_redirects",
            "Redirects followed per attempt (--max-redirects)",
            m.max_redirects.clone(),
        );
        registry.register(
            "spoold_ready",
            "1 if the store could make a write durable at the last scrape or readiness probe",
            m.ready.clone(),
        );
        registry.register(
            "spoold_paused_targets",
            "Targets paused after refusing connections; probed one delivery at a time",
            m.paused_targets.clone(),
        );
        registry.register(
            "spoold_reconcile_checks",
            "Reconciliation checks of unknown at-most-once deliveries, by result: match, \
             multiple, none, failed",
            m.reconcile_checks.clone(),
        );
        registry.register(
            "spoold_unknown_duration_seconds",
            "Time at-most-once deliveries spent in unknown before reconciliation or a person \
             settled them (or the window closed)",
            m.unknown_duration.clone(),
        );
        registry.register("spoold_tasks", "Current tasks by status", m.tasks.clone());
        registry.register(
            "spoold_task_submissions",
            "Task submissions that created a task, by type",
            m.task_submissions.clone(),
        );
        registry.register(
            "spoold_task_idempotent_duplicates",
            "Task submissions answered with the existing task of their key, by type",
            m.task_duplicates.clone(),
        );
        registry.register(
            "spoold_tasks_finished",
            "Task attempts that ended their task, by type, final status and error code",
            m.tasks_finished.clone(),
        );
        registry.register(
            "spoold_task_retries",
            "Task attempts that ended in a scheduled retry, by type",
            m.task_retries.clone(),
        );
        registry.register(
            "spoold_task_attempt_duration_seconds",
            "Duration of task attempts, by type",
            m.task_attempt_duration.clone(),
        );
        registry.register(
            "spoold_task_queue_wait_seconds",
            "Time from submission to the first attempt's start, by type",
            m.task_queue_wait.clone(),
        );
        registry.register(
            "spoold_task_recovered_processes",
            "Processes of interrupted task attempts that a previous daemon left running, ended at \
             start-up",
            m.task_recovered_processes.clone(),
        );
        registry.register(
            "spoold_task_waits",
            "Times a claim passed over a due task because its type's concurrency was used up \
             (reason=quota) or a lock it needs was held or wanted by a task ahead of it \
             (reason=lock), by type",
            m.task_waits.clone(),
        );
        registry.register(
            "spoold_task_output_truncated_bytes",
            "Bytes of task output dropped between the kept head and tail, by type",
            m.task_output_truncated_bytes.clone(),
        );
        registry.register(
            "spoold_task_redactions",
            "Secrets and patterns replaced by [REDACTED] in task output, by type",
            m.task_redactions.clone(),
        );
        registry.register(
            "spoold_unrecorded_results",
            "Attempts' results this daemon holds because the database was out of reach, by kind \
             (delivery, task); recorded once it is back",
            m.unrecorded.clone(),
        );
        if settings.postgres {
            registry.register(
                "spoold_db_standbys",
                "PostgreSQL standbys streaming, by mode (synchronous: an acknowledged commit is \
                 on one of them)",
                m.db_standbys.clone(),
            );
            registry.register(
                "spoold_db_replication_risk",
                "1 when the PostgreSQL server's replication lets a failover lose acknowledged \
                 writes, or makes every commit wait for a standby that is not there",
                m.db_replication_risk.clone(),
            );
        }
        m.db_max_bytes.set(settings.max_db_bytes as i64);
        m.allow_private_targets
            .set(i64::from(settings.allow_private_targets));
        m.allowed_target_ranges
            .set(settings.allowed_target_ranges as i64);
        m.max_redirects.set(i64::from(settings.max_redirects));
        for status in DeliveryStatus::ALL {
            let _ = m.deliveries.get_or_create(&StatusLabel {
                status: status.as_str(),
            });
        }
        for result in [
            "succeeded",
            "retryable_failure",
            "terminal_failure",
            "interrupted",
        ] {
            let _ = m.results.get_or_create(&ResultLabel { result });
        }
        Metrics { registry, ..m }
    }

    /// Refresh the gauges that mirror the store.
    pub fn observe_store(&self, stats: &Stats, now_ms: i64) {
        for status in DeliveryStatus::ALL {
            let n = stats
                .by_status
                .iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, n)| *n);
            self.deliveries
                .get_or_create(&StatusLabel {
                    status: status.as_str(),
                })
                .set(n as i64);
        }
        self.db_bytes.set(stats.db_bytes as i64);
        let age = stats
            .oldest_due_at
            .map_or(0.0, |at| (now_ms - at).max(0) as f64 / 1000.0);
        self.oldest_due_age.set(age);
    }

    /// Refresh the gone-URL gauges: an origin none of whose URLs is gone any more is dropped.
    pub fn observe_gone(&self, now: std::collections::BTreeMap<String, u64>) {
        self.gone_targets.set(now.values().sum::<u64>() as i64);
        self.gone_urls.clear();
        for (origin, n) in now {
            self.gone_urls
                .get_or_create(&OriginLabel { origin })
                .set(n as i64);
        }
    }

    /// Refresh the PostgreSQL replication gauges.
    pub fn observe_replication(&self, replication: &spool_store::postgres::Replication) {
        for (mode, n) in [
            ("synchronous", replication.synchronous),
            ("asynchronous", replication.asynchronous),
        ] {
            self.db_standbys
                .get_or_create(&ModeLabel { mode })
                .set(i64::from(n));
        }
        self.db_replication_risk
            .set(i64::from(replication.risk().is_some()));
    }

    /// Refresh the task gauges from the store's counts.
    pub fn observe_tasks(&self, counts: &[(spool_store::tasks::TaskStatus, u64)]) {
        for (status, n) in counts {
            self.tasks
                .get_or_create(&StatusLabel {
                    status: status.as_str(),
                })
                .set(*n as i64);
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode_openmetrics(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The classic Prometheus text format (0.0.4), which spoold v0.1.0 served and every
    /// scraper and `promtool` read.
    pub fn encode_classic(&self) -> String {
        to_classic(&self.encode_openmetrics())
    }
}

impl spool_store::CommitObserver for Metrics {
    fn committed(&self, batch_size: usize, seconds: f64, ok: bool) {
        self.commit_duration.observe(seconds);
        self.commit_batch.observe(batch_size as f64);
        if !ok {
            self.commit_failures.inc();
        }
    }
}

/// OpenMetrics → Prometheus text 0.0.4: counter families are named with their `_total`
/// suffix in HELP and TYPE, and the OpenMetrics-only `# UNIT` and `# EOF` lines go.
fn to_classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_format_names_counters_with_total() {
        let om = "# HELP a_things Things.\n# TYPE a_things counter\na_things_total 3\n\
                  # HELP b Gauge.\n# TYPE b gauge\n# UNIT b seconds\nb 1\n# EOF\n";
        assert_eq!(
            to_classic(om),
            "# HELP a_things_total Things.\n# TYPE a_things_total counter\na_things_total 3\n\
             # HELP b Gauge.\n# TYPE b gauge\nb 1\n"
        );
    }
}

//! Results this daemon holds but could not record yet: an attempt's outcome that came while the
//! database was out of reach (a PostgreSQL server restarting, a failover). The attempt that
//! waits keeps its result in memory and writes it again until the database takes it; from its
//! first refusal on, the result is also kept here, one file per result under
//! `<data-dir>/unrecorded/`, so that a daemon stopped or killed during the outage records it at
//! its next start, before it takes anything back.
//!
//! **Invariant:** a result known here is never dropped while its claim may still be current: the
//! file is removed only after the store answered the write (applied, or fenced off by a newer
//! claim), never because the database stayed away. Recording one again is harmless: each write
//! is fenced by the attempt's claim (`claim_seq`), so a result applies at most once, and a late
//! at-most-once 2xx settles only the `unknown` its own take-back left.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use spool_store::model::{Applied, AttemptResult, Disposition, Mode};
use spool_store::tasks::{TaskAttemptEnd, TaskStatus};
use spool_store::{Store, StoreError};
use tracing::{info, warn};

/// The directory's name inside the data directory.
pub const DIR: &str = "unrecorded";

/// Where results wait for the database, on this host's disk. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
}

/// One result kept in the journal: removed once recorded ([`Journal::done`]).
#[derive(Debug)]
pub struct Kept(Option<PathBuf>);

/// A result as written to its file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Entry {
    Delivery(DeliveryResult),
    Task(TaskEnd),
}

#[derive(Debug, Serialize, Deserialize)]
struct DeliveryResult {
    id: String,
    claim_seq: u32,
    /// `at_least_once` or `at_most_once`: only an at-most-once success settles a take-back.
    mode: String,
    disposition: StoredDisposition,
    http_status: Option<u16>,
    error_code: Option<String>,
    error: Option<String>,
    duration_ms: i64,
    remote_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "as", rename_all = "snake_case")]
enum StoredDisposition {
    Succeeded,
    Retry { delay_ms: i64 },
    Failed,
    Interrupted,
    Unknown { check_in_ms: i64 },
}

#[derive(Debug, Serialize, Deserialize)]
struct TaskEnd {
    id: String,
    claim_seq: u32,
    task_type: String,
    outcome: String,
    exit_code: Option<i32>,
    signal: Option<i32>,
    error_code: Option<String>,
    error: Option<String>,
    duration_ms: i64,
    output_bytes: u64,
    output_truncated: bool,
    killed: bool,
    result_summary: Option<String>,
    retry_at: Option<i64>,
    hold_locks: bool,
    review_partial: bool,
    redactions: u64,
    /// Where an interrupted attempt takes its task (the type's `on_interrupt`), if it does.
    on_interrupt: Option<String>,
    /// Nothing of it ran (absent in what an earlier version kept: it ran).
    #[serde(default)]
    never_ran: bool,
}

/// What a start found in the journal and did with it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    /// Results recorded now (applied, or fenced off by a newer claim).
    pub recorded: usize,
    /// Results the database was still out of reach for: kept for the next start.
    pub kept: usize,
    /// Files that could not be read (moved aside as `*.bad`).
    pub unreadable: usize,
}

impl Journal {
    pub fn new(data_dir: &Path) -> Journal {
        Journal {
            dir: data_dir.join(DIR),
        }
    }

    /// Keep a delivery attempt's result (`mode`: its delivery's) until [`Journal::done`].
    /// A journal that cannot be written is logged: the result is still kept in memory.
    pub async fn keep_delivery(&self, result: &AttemptResult, mode: Mode) -> Kept {
        let entry = Entry::Delivery(DeliveryResult {
            id: result.id.clone(),
            claim_seq: result.claim_seq,
            mode: mode.as_str().to_owned(),
            disposition: match result.disposition {
                Disposition::Succeeded => StoredDisposition::Succeeded,
                Disposition::Retry { delay_ms } => StoredDisposition::Retry { delay_ms },
                Disposition::Failed => StoredDisposition::Failed,
                Disposition::Interrupted => StoredDisposition::Interrupted,
                Disposition::Unknown { check_in_ms } => StoredDisposition::Unknown { check_in_ms },
            },
            http_status: result.http_status,
            error_code: result.error_code.clone(),
            error: result.error.clone(),
            duration_ms: result.duration_ms,
            remote_id: result.remote_id.clone(),
        });
        self.keep(format!("d-{}-{}", result.id, result.claim_seq), entry)
            .await
    }

    /// Keep how a task's attempt ended until [`Journal::done`]; `on_interrupt`: the status an
    /// interrupted attempt's task goes to next.
    pub async fn keep_task(
        &self,
        end: &TaskAttemptEnd,
        task_type: &str,
        on_interrupt: Option<TaskStatus>,
    ) -> Kept {
        let entry = Entry::Task(TaskEnd {
            id: end.id.clone(),
            claim_seq: end.claim_seq,
            task_type: task_type.to_owned(),
            outcome: end.outcome.as_str().to_owned(),
            exit_code: end.exit_code,
            signal: end.signal,
            error_code: end.error_code.clone(),
            error: end.error.clone(),
            duration_ms: end.duration_ms,
            output_bytes: end.output_bytes,
            output_truncated: end.output_truncated,
            killed: end.killed,
            result_summary: end.result_summary.clone(),
            retry_at: end.retry_at,
            hold_locks: end.hold_locks,
            review_partial: end.review_partial,
            redactions: end.redactions,
            on_interrupt: on_interrupt.map(|s| s.as_str().to_owned()),
            never_ran: end.never_ran,
        });
        self.keep(format!("t-{}-{}", end.id, end.claim_seq), entry)
            .await
    }

    async fn keep(&self, name: String, entry: Entry) -> Kept {
        let path = self.dir.join(name);
        let written = tokio::task::spawn_blocking(move || {
            let bytes = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
            spool_store::durable_file::write(&path, &bytes).map(|()| path)
        })
        .await;
        match written {
            Ok(Ok(path)) => Kept(Some(path)),
            Ok(Err(e)) => {
                warn!(dir = %self.dir.display(), error = %e,
                      "cannot keep a result on disk while the database is out of reach; it is \
                       kept in memory only (a restart before the database is back loses it)");
                Kept(None)
            }
            Err(e) => {
                warn!(error = %e, "cannot keep a result on disk");
                Kept(None)
            }
        }
    }

    /// The result is recorded (or fenced off): its file goes.
    pub fn done(&self, kept: Kept) {
        if let Some(path) = kept.0 {
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    warn!(path = %path.display(), error = %e, "cannot remove a recorded result's file");
                }
            }
        }
    }

    /// Record what an earlier run of this daemon kept here, before anything is taken back:
    /// each result is written fenced by its claim, as its attempt would have written it.
    pub async fn replay(&self, store: &Store) -> Replayed {
        let mut replayed = Replayed::default();
        let names = match std::fs::read_dir(&self.dir) {
            Ok(entries) => {
                let mut names: Vec<PathBuf> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| !n.starts_with('.') && !n.ends_with(".bad"))
                    })
                    .collect();
                names.sort();
                names
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return replayed,
            Err(e) => {
                warn!(dir = %self.dir.display(), error = %e, "cannot read the unrecorded results");
                return replayed;
            }
        };
        for path in names {
            let entry = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| {
                    serde_json::from_slice::<Entry>(&bytes).map_err(|e| e.to_string())
                })
                .and_then(|entry| entry.check().map(|()| entry));
            let entry = match entry {
                Ok(entry) => entry,
                Err(why) => {
                    warn!(path = %path.display(), why,
                          "an unrecorded result's file cannot be read; moved aside");
                    let _ = std::fs::rename(&path, path.with_extension("bad"));
                    replayed.unreadable += 1;
                    continue;
                }
            };
            match entry.record(store).await {
                Ok(()) => {
                    let _ = std::fs::remove_file(&path);
                    replayed.recorded += 1;
                }
                Err(StoreError::Unavailable(e)) => {
                    warn!(path = %path.display(), error = %e,
                          "the database is out of reach: a result an earlier run kept stays for \
                           the next start");
                    replayed.kept += 1;
                }
                Err(e) => {
                    warn!(path = %path.display(), error = %e,
                          "the store refused a result an earlier run kept; moved aside");
                    let _ = std::fs::rename(&path, path.with_extension("bad"));
                    replayed.unreadable += 1;
                }
            }
        }
        replayed
    }
}

impl Entry {
    /// Refuse what no run of this daemon writes (a hand-edited or truncated file).
    fn check(&self) -> Result<(), String> {
        match self {
            Entry::Delivery(d) => match d.mode.as_str() {
                "at_least_once" | "at_most_once" => Ok(()),
                other => Err(format!("unknown mode {other:?}")),
            },
            Entry::Task(t) => {
                let outcome: TaskStatus = t.outcome.parse().map_err(|e| format!("{e}"))?;
                if matches!(
                    outcome,
                    TaskStatus::Pending | TaskStatus::Running | TaskStatus::ManualReview
                ) {
                    return Err(format!("{outcome} is not how an attempt ends"));
                }
                if let Some(then) = &t.on_interrupt {
                    then.parse::<TaskStatus>().map_err(|e| format!("{e}"))?;
                }
                Ok(())
            }
        }
    }

    /// Write the result as its attempt would have.
    async fn record(self, store: &Store) -> Result<(), StoreError> {
        match self {
            Entry::Delivery(d) => {
                let at_most_once = d.mode == "at_most_once";
                let result = AttemptResult {
                    id: d.id,
                    claim_seq: d.claim_seq,
                    disposition: match d.disposition {
                        StoredDisposition::Succeeded => Disposition::Succeeded,
                        StoredDisposition::Retry { delay_ms } => Disposition::Retry { delay_ms },
                        StoredDisposition::Failed => Disposition::Failed,
                        StoredDisposition::Interrupted => Disposition::Interrupted,
                        StoredDisposition::Unknown { check_in_ms } => {
                            Disposition::Unknown { check_in_ms }
                        }
                    },
                    http_status: d.http_status,
                    error_code: d.error_code,
                    error: d.error,
                    duration_ms: d.duration_ms,
                    remote_id: d.remote_id,
                };
                let (id, claim_seq) = (result.id.clone(), result.claim_seq);
                match store.complete(result.clone()).await? {
                    Applied::Now(status) => {
                        info!(delivery_id = %id, claim_seq, status = %status.as_str(),
                        "recorded an attempt's result an earlier run kept while the database was out of reach")
                    }
                    Applied::Fenced
                        if at_most_once && result.disposition == Disposition::Succeeded =>
                    {
                        let settled = store.late_answer(result).await?;
                        info!(delivery_id = %id, claim_seq, settled,
                              "an at-most-once 2xx an earlier run kept came after its claim was \
                               taken back: it settles what the take-back left (late_answer)");
                    }
                    Applied::Fenced => info!(delivery_id = %id, claim_seq,
                        "an attempt's result an earlier run kept came after its claim was taken \
                         back; the delivery stays as it is"),
                }
                Ok(())
            }
            Entry::Task(t) => {
                let outcome: TaskStatus = t
                    .outcome
                    .parse()
                    .map_err(|e| StoreError::Database(format!("unrecorded task end: {e}")))?;
                let on_interrupt = t.on_interrupt.as_deref().and_then(|s| s.parse().ok());
                let end = TaskAttemptEnd {
                    id: t.id,
                    claim_seq: t.claim_seq,
                    outcome,
                    exit_code: t.exit_code,
                    signal: t.signal,
                    error_code: t.error_code,
                    error: t.error,
                    duration_ms: t.duration_ms,
                    output_bytes: t.output_bytes,
                    output_truncated: t.output_truncated,
                    killed: t.killed,
                    result_summary: t.result_summary,
                    retry_at: t.retry_at,
                    hold_locks: t.hold_locks,
                    review_partial: t.review_partial,
                    redactions: t.redactions,
                    never_ran: t.never_ran,
                };
                let (id, claim_seq) = (end.id.clone(), end.claim_seq);
                match store.finish_task(end).await? {
                    Some(status) => {
                        info!(task_id = %id, claim_seq, task_type = %t.task_type, status = %status,
                              "recorded how an attempt ended, kept by an earlier run while the \
                               database was out of reach");
                        if let (TaskStatus::Interrupted, Some(then)) = (status, on_interrupt) {
                            store
                                .decide_task(
                                    id,
                                    then,
                                    "on_interrupt".into(),
                                    Some("the type's on_interrupt".into()),
                                )
                                .await?;
                        }
                    }
                    None => info!(task_id = %id, claim_seq,
                                  "how an attempt ended, kept by an earlier run, came after its \
                                   task was taken over; the take-over settles it"),
                }
                Ok(())
            }
        }
    }
}

//! `spoolctl export` and `spoolctl import`: deliveries with their history as JSON lines, out
//! of one spoold and into another (`GET /v1/export`, `POST /v1/import`), and the pending
//! deliveries of a spoold v0.1.0 journal into spoold.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use anyhow::{anyhow, Context as _};
use base64::Engine as _;
use serde::Deserialize;
use spool_proto::transfer::{
    BodyKind, ExportRecord, ExportedDelivery, ExportedTransition, ImportOutcome, ImportRequest,
    EXPORT_FORMAT,
};
use spool_proto::{units, DeliveryStatus};

use crate::cli::{ExportArgs, ImportArgs};
use crate::client::Client;
use crate::commands::transition::filter;
use crate::commands::Exit;
use crate::output::Output;

/// Records sent in one import request.
const BATCH: usize = 200;
/// Bytes of records sent in one import request, at most (a record's body can be 1 MiB).
const BATCH_BYTES: usize = 16 << 20;

pub async fn export(
    client: &Client,
    args: ExportArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let filter = filter(&args.filter)?.unwrap_or_default();
    let mut file = match &args.output {
        Some(path) => Some(BufWriter::new(
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("create {}", path.display()))?,
        )),
        None => None,
    };
    let mut cursor: Option<String> = None;
    let mut written = 0u64;
    loop {
        let page = client.export_page(&filter, cursor.as_deref()).await?;
        for record in &page.records {
            let mut line = serde_json::to_vec(record)?;
            line.push(b'\n');
            match &mut file {
                Some(file) => file.write_all(&line)?,
                None => out.raw(&line)?,
            }
            written += 1;
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    if let Some(file) = &mut file {
        file.flush()?;
        file.get_ref().sync_all()?;
    }
    eprintln!("spoolctl: exported {written} deliveries");
    Ok(Exit::Success)
}

pub async fn import(
    client: &Client,
    args: ImportArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let reader: Box<dyn Read> = if args.file.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(&args.file)
                .with_context(|| format!("open {}", args.file.display()))?,
        )
    };
    let mut lines = Lines::new(reader);
    let mut tally = Tally::default();
    let mut batch = Batch::default();
    if args.spoold_journal {
        // The journal is replayed whole: a later record of a delivery replaces an earlier one.
        let lines = lines
            .by_ref()
            .collect::<std::io::Result<Vec<Line>>>()
            .context("read")?;
        for record in from_journal(&lines, &mut tally)? {
            batch.push(client, record, &mut tally).await?;
        }
    } else {
        // An export is read a line at a time and sent a batch at a time: any size fits.
        for line in lines {
            let line = line.context("read")?;
            match serde_json::from_str::<ExportRecord>(&line.text) {
                Ok(record) => batch.push(client, record, &mut tally).await?,
                Err(e) if line.torn => tally.torn(line.number, &e.to_string()),
                Err(e) => {
                    eprintln!("spoolctl: line {}: not an export record: {e}", line.number);
                    tally.unreadable += 1;
                }
            }
        }
    }
    batch.flush(client, &mut tally).await?;
    out.line(&tally.summary())?;
    if tally.refused() > 0 {
        return Err(anyhow!(
            "{} records were not imported (see above)",
            tally.refused()
        ));
    }
    Ok(Exit::Success)
}

/// Records waiting to be sent in one import request.
#[derive(Default)]
struct Batch {
    records: Vec<ExportRecord>,
    bytes: usize,
}

impl Batch {
    /// Add `record`; send the batch once it is full.
    async fn push(
        &mut self,
        client: &Client,
        record: ExportRecord,
        tally: &mut Tally,
    ) -> anyhow::Result<()> {
        self.bytes += record.delivery.body_base64.len() + 1024;
        self.records.push(record);
        if self.records.len() >= BATCH || self.bytes >= BATCH_BYTES {
            self.flush(client, tally).await?;
        }
        Ok(())
    }

    /// Send what is waiting, if anything.
    async fn flush(&mut self, client: &Client, tally: &mut Tally) -> anyhow::Result<()> {
        self.bytes = 0;
        match std::mem::take(&mut self.records) {
            records if records.is_empty() => Ok(()),
            records => send(client, records, tally).await,
        }
    }
}

async fn send(
    client: &Client,
    records: Vec<ExportRecord>,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let answer = client.import(&ImportRequest { records }).await?;
    for result in answer.results {
        match result.outcome {
            ImportOutcome::Imported => tally.imported += 1,
            ImportOutcome::Existing => tally.existing += 1,
            ImportOutcome::Conflict => {
                eprintln!(
                    "spoolctl: {}: conflict: its id or idempotency key belongs to delivery {} \
                     (a different request); not imported",
                    result.id,
                    result.existing_id.as_deref().unwrap_or("?")
                );
                tally.conflicts += 1;
            }
            ImportOutcome::Invalid => {
                eprintln!(
                    "spoolctl: {}: not imported: {}",
                    result.id,
                    result.error.as_deref().unwrap_or("invalid")
                );
                tally.invalid += 1;
            }
        }
    }
    Ok(())
}

/// What an import came to.
#[derive(Debug, Default)]
struct Tally {
    imported: u64,
    existing: u64,
    conflicts: u64,
    invalid: u64,
    unreadable: u64,
    /// Journal deliveries that were finished, not carried over.
    finished: u64,
    torn: bool,
}

impl Tally {
    fn torn(&mut self, line: usize, error: &str) {
        eprintln!("spoolctl: line {line}: the last line is torn ({error}); skipped");
        self.torn = true;
    }

    fn refused(&self) -> u64 {
        self.conflicts + self.invalid + self.unreadable
    }

    /// `imported 118, already there 2, conflicts 0, invalid 0`.
    fn summary(&self) -> String {
        let mut line = format!(
            "imported {}, already there {}, conflicts {}, invalid {}",
            self.imported,
            self.existing,
            self.conflicts,
            self.invalid + self.unreadable
        );
        if self.finished > 0 {
            line.push_str(&format!(
                ", finished in the journal and left out {}",
                self.finished
            ));
        }
        if self.torn {
            line.push_str(", torn last line skipped");
        }
        line
    }
}

/// One line of the input, numbered from 1; `torn` for a last line without its newline.
struct Line {
    number: usize,
    text: String,
    torn: bool,
}

/// The non-blank lines of a reader, one at a time.
struct Lines {
    reader: BufReader<Box<dyn Read>>,
    number: usize,
}

impl Lines {
    fn new(reader: Box<dyn Read>) -> Lines {
        Lines {
            reader: BufReader::new(reader),
            number: 0,
        }
    }
}

impl Iterator for Lines {
    type Item = std::io::Result<Line>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match self.reader.read_until(b'\n', &mut buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
            // Only the last line can lack its newline.
            let torn = buf.last() != Some(&b'\n');
            let text = String::from_utf8_lossy(&buf).trim_end().to_owned();
            if !text.is_empty() {
                self.number += 1;
                return Some(Ok(Line {
                    number: self.number,
                    text,
                    torn,
                }));
            }
        }
    }
}

/// A record of a spoold v0.1.0 journal: the delivery as it then was, or its removal.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JournalRecord {
    #[serde(default)]
    delivery: Option<JournalDelivery>,
    #[serde(default)]
    deleted_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JournalDelivery {
    id: String,
    #[serde(default)]
    idempotency_key: Option<String>,
    target_url: String,
    method: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<Box<serde_json::value::RawValue>>,
    status: String,
    #[serde(default)]
    attempts: u32,
    max_attempts: u32,
    #[serde(default)]
    next_attempt_at: Option<String>,
    #[serde(default)]
    last_error: Option<String>,
    #[serde(default)]
    last_response_code: Option<u16>,
    created_at: String,
    updated_at: String,
}

/// The journal replayed (each record replaces the last of its delivery; a removal removes
/// it), and its pending and in-flight deliveries as export records, due as the journal says
/// (in-flight ones at once: the old daemon is gone).
fn from_journal(lines: &[Line], tally: &mut Tally) -> anyhow::Result<Vec<ExportRecord>> {
    let mut live: BTreeMap<String, (usize, JournalDelivery)> = BTreeMap::new();
    for (order, line) in lines.iter().enumerate() {
        let record: JournalRecord = match serde_json::from_str(&line.text) {
            Ok(record) => record,
            Err(e) if line.torn => {
                tally.torn(line.number, &e.to_string());
                continue;
            }
            Err(e) => {
                return Err(anyhow!(
                    "line {}: not a spoold journal record: {e}",
                    line.number
                ))
            }
        };
        if let Some(id) = record.deleted_id {
            live.remove(&id);
        }
        if let Some(d) = record.delivery {
            let first = live.get(&d.id).map_or(order, |(first, _)| *first);
            live.insert(d.id.clone(), (first, d));
        }
    }
    let now = crate::output::now_ms();
    let mut in_order: Vec<(usize, JournalDelivery)> = live.into_values().collect();
    in_order.sort_by_key(|(first, _)| *first);
    let mut records = Vec::new();
    for (_, d) in in_order {
        let due = match d.status.as_str() {
            "pending" => time_ms(d.next_attempt_at.as_deref()).unwrap_or(now),
            "in_flight" => now,
            _ => {
                tally.finished += 1;
                continue;
            }
        };
        let created = time_ms(Some(&d.created_at)).unwrap_or(now);
        let body = d.body.map(|raw| raw.get().as_bytes().to_vec());
        records.push(ExportRecord {
            format: EXPORT_FORMAT,
            delivery: ExportedDelivery {
                id: d.id,
                idempotency_key: d.idempotency_key.filter(|k| !k.is_empty()),
                request_digest: None,
                target_url: d.target_url,
                method: d.method,
                headers: d.headers.into_iter().collect(),
                body_kind: if body.is_some() {
                    BodyKind::Json
                } else {
                    BodyKind::None
                },
                body_base64: base64::engine::general_purpose::STANDARD
                    .encode(body.unwrap_or_default()),
                status: DeliveryStatus::Pending,
                // One attempt left at least: an in-flight one that was the last is sent again.
                attempts: i64::from(d.attempts.min(d.max_attempts.saturating_sub(1))),
                uncharged: 0,
                max_attempts: i64::from(d.max_attempts),
                cycle: 1,
                last_error: d.last_error.filter(|e| !e.is_empty()),
                last_error_code: None,
                last_response_code: d.last_response_code.filter(|c| *c != 0).map(i64::from),
                created_at_ms: created,
                updated_at_ms: time_ms(Some(&d.updated_at)).unwrap_or(created),
                next_attempt_at_ms: Some(due),
                not_before_ms: None,
                expires_at_ms: None,
                mode: spool_proto::DeliveryMode::AtLeastOnce,
                fingerprint: None,
                reconcile: None,
                remote_id_pointer: None,
                observation_window_ms: None,
                remote_id: None,
                unknown_since_ms: None,
                review_at_ms: None,
                check_at_ms: None,
                sign_secret: None,
            },
            attempts: Vec::new(),
            transitions: vec![ExportedTransition {
                from: None,
                to: DeliveryStatus::Pending,
                attempt: 0,
                at_ms: created,
                reason: "created".to_owned(),
                note: Some("imported from a spoold v0.1.0 journal".to_owned()),
            }],
            checks: Vec::new(),
        });
    }
    Ok(records)
}

/// A journal time (RFC 3339, Go's zero time for none) in milliseconds.
fn time_ms(text: Option<&str>) -> Option<i64> {
    units::parse_time(text?).ok().filter(|ms| *ms > 0)
}

//! `spoolctl export` and `spoolctl import`: deliveries with their history as JSON lines, out
//! of one spoold and into another (`GET /v1/export`, `POST /v1/import`), and the pending
//! deliveries of a spoold v0.1.0 journal into spoold.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use anyhow::{anyhow, Context as _};
use spool_proto::journal::{self, Line};
use spool_proto::transfer::{ExportRecord, ImportOutcome, ImportRequest};

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
        let replayed = journal::replay(&lines, crate::output::now_ms())?;
        if let Some(torn) = &replayed.torn {
            tally.torn(torn.number, &torn.error);
        }
        tally.finished += replayed.finished;
        for record in replayed.records {
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

/// The non-blank lines of a reader, one at a time (a journal's too: [`journal::replay`] reads
/// them).
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
            if let Some(line) = Line::from_bytes(self.number + 1, &buf) {
                self.number += 1;
                return Some(Ok(line));
            }
        }
    }
}

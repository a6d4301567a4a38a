//! `spoolctl export` and `spoolctl import`: deliveries with their history as JSON lines, out
//! of one spoold and into another (`GET /v1/export`, `POST /v1/import`), and the deliveries of
//! a spoold v0.1.0 journal into spoold.

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
        let mut whole = Vec::new();
        for read in lines.by_ref() {
            match read.context("read")? {
                Input::Line(line) => whole.push(line),
                // A journal line is one delivery's record, well under this: the file is not a
                // journal (or is damaged), and its lines cannot be told apart.
                Input::TooLong { number } => {
                    return Err(anyhow!(
                        "line {number}: longer than {} MiB, not a spoold journal record; \
                         nothing imported",
                        MAX_LINE_BYTES >> 20
                    ))
                }
            }
        }
        let replayed = journal::replay(&whole, crate::output::now_ms())?;
        if let Some(torn) = &replayed.torn {
            tally.torn(torn.number, &torn.error);
        }
        tally.finished += replayed.finished;
        // Refused and carried ones are reported in journal order, refusals first.
        for refused in &replayed.refused {
            eprintln!(
                "spoolctl: line {}: {}: not imported: {}",
                refused.line, refused.id, refused.reason
            );
            tally.invalid += 1;
        }
        for carried in replayed.records {
            batch
                .push(client, carried.line, carried.record, &mut tally)
                .await?;
        }
    } else {
        // An export is read a line at a time and sent a batch at a time: any size fits.
        for read in lines {
            let line = match read.context("read")? {
                Input::Line(line) => line,
                Input::TooLong { number } => {
                    eprintln!(
                        "spoolctl: line {number}: longer than {} MiB, not read (no export \
                         record is that long)",
                        MAX_LINE_BYTES >> 20
                    );
                    tally.unreadable += 1;
                    continue;
                }
            };
            match serde_json::from_str::<ExportRecord>(&line.text) {
                Ok(record) => batch.push(client, line.number, record, &mut tally).await?,
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

/// The longest line read: a record the daemon could take in one import request. Longer lines
/// are skipped as they are read, never held whole.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Records waiting to be sent in one import request, with the lines they came from.
#[derive(Default)]
struct Batch {
    records: Vec<ExportRecord>,
    lines: Vec<usize>,
    bytes: usize,
}

impl Batch {
    /// Add `record`, read from line `line`; send the batch once it is full.
    async fn push(
        &mut self,
        client: &Client,
        line: usize,
        record: ExportRecord,
        tally: &mut Tally,
    ) -> anyhow::Result<()> {
        self.bytes += record.delivery.body_base64.len() + 1024;
        self.records.push(record);
        self.lines.push(line);
        if self.records.len() >= BATCH || self.bytes >= BATCH_BYTES {
            self.flush(client, tally).await?;
        }
        Ok(())
    }

    /// Send what is waiting, if anything.
    async fn flush(&mut self, client: &Client, tally: &mut Tally) -> anyhow::Result<()> {
        self.bytes = 0;
        let lines = std::mem::take(&mut self.lines);
        match std::mem::take(&mut self.records) {
            records if records.is_empty() => Ok(()),
            records => send(client, records, &lines, tally).await,
        }
    }
}

async fn send(
    client: &Client,
    records: Vec<ExportRecord>,
    lines: &[usize],
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let answer = client.import(&ImportRequest { records }).await?;
    for (n, result) in answer.results.into_iter().enumerate() {
        let line = lines.get(n).copied().unwrap_or_default();
        match result.outcome {
            ImportOutcome::Imported => tally.imported += 1,
            ImportOutcome::Existing => tally.existing += 1,
            ImportOutcome::Conflict => {
                eprintln!(
                    "spoolctl: line {line}: {}: conflict: its id or idempotency key belongs to \
                     delivery {} (a different request); not imported",
                    result.id,
                    result.existing_id.as_deref().unwrap_or("?")
                );
                tally.conflicts += 1;
            }
            ImportOutcome::Invalid => {
                eprintln!(
                    "spoolctl: line {line}: {}: not imported: {}",
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
    /// Journal deliveries that finished past v0.1.0's retention, not carried over.
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
                ", finished more than 168h ago and left out {}",
                self.finished
            ));
        }
        if self.torn {
            line.push_str(", torn last line skipped");
        }
        line
    }
}

/// One line read: a non-blank line, or one too long to be read.
enum Input {
    Line(Line),
    /// Longer than [`MAX_LINE_BYTES`]: skipped to its end without being kept.
    TooLong {
        number: usize,
    },
}

/// The non-blank lines of a reader, one at a time, numbered as a text editor numbers them (a
/// journal's too: [`journal::replay`] reads them).
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

    /// The next line's bytes (with its newline, if it has one), or `None` at the end; `Err`
    /// with the bytes dropped if it is longer than [`MAX_LINE_BYTES`].
    fn next_raw(&mut self) -> std::io::Result<Option<Result<Vec<u8>, ()>>> {
        let mut buf = Vec::new();
        let mut too_long = false;
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            let (take, ended) = match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if !too_long && buf.len() + take > MAX_LINE_BYTES {
                too_long = true;
                buf = Vec::new();
            }
            if !too_long {
                buf.extend_from_slice(&chunk[..take]);
            }
            self.reader.consume(take);
            if ended {
                return Ok(Some(if too_long { Err(()) } else { Ok(buf) }));
            }
        }
        Ok(match (too_long, buf.is_empty()) {
            (true, _) => Some(Err(())),
            (false, true) => None,
            (false, false) => Some(Ok(buf)),
        })
    }
}

impl Iterator for Lines {
    type Item = std::io::Result<Input>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let raw = match self.next_raw() {
                Ok(Some(raw)) => raw,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            };
            self.number += 1;
            match raw {
                Err(()) => {
                    return Some(Ok(Input::TooLong {
                        number: self.number,
                    }))
                }
                Ok(bytes) => {
                    if let Some(line) = Line::from_bytes(self.number, &bytes) {
                        return Some(Ok(Input::Line(line)));
                    }
                }
            }
        }
    }
}

//! What spoolctl prints: aligned tables laid out like Go's `text/tabwriter` (padding 2, as
//! spoold v0.1.0's spoolctl does), delivery rows, detail lines, and compact JSON. Scripts parse
//! this output, so its shape only changes on purpose.

use std::io::{self, Write};

use serde::Serialize;
use spool_proto::units::format_duration;
use spool_proto::{AttemptView, DeliveryView};

/// Spaces after every cell except a row's last one, on top of the column width.
const PADDING: usize = 2;
/// Longest error text shown in the attempts table.
const MAX_TABLE_ERROR_CHARS: usize = 80;

/// Where a command writes its result, and in which form.
pub struct Output<'a> {
    out: &'a mut dyn Write,
    json: bool,
}

impl<'a> Output<'a> {
    pub fn new(out: &'a mut dyn Write, json: bool) -> Self {
        Output { out, json }
    }

    /// True when the user asked for JSON instead of tables.
    pub fn is_json(&self) -> bool {
        self.json
    }

    /// One compact JSON document and a newline, like spoold's own responses.
    pub fn json<T: Serialize>(&mut self, value: &T) -> io::Result<()> {
        serde_json::to_writer(&mut *self.out, value)?;
        self.out.write_all(b"\n")
    }

    pub fn table(&mut self, table: &Table) -> io::Result<()> {
        self.out.write_all(table.render().as_bytes())
    }

    /// Bytes exactly as given (e.g. a completion script).
    pub fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    pub fn line(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "{text}")
    }

    /// A delivery as one table row prefixed with `action`, then its detail lines.
    pub fn delivery(&mut self, action: &str, d: &DeliveryView, details: Details) -> io::Result<()> {
        let mut table = Table::new();
        table.row(delivery_row(Some(action), d));
        self.table(&table)?;
        for line in detail_lines(d, details) {
            self.line(&line)?;
        }
        Ok(())
    }
}

/// Which detail lines follow a delivery row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Details {
    /// Only `last error:` (spoold v0.1.0's spoolctl).
    LastError,
    /// `last error:`, `last error code:` and `next attempt at:`.
    Full,
}

/// A table whose columns are aligned the way Go's tabwriter aligns them: every cell except the
/// last of its row is padded with spaces to the widest cell of its column plus two. Widths count
/// characters, not bytes. Rows are expected to have the same number of cells.
#[derive(Debug, Default, Clone)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new() -> Self {
        Table::default()
    }

    /// Adds a row. Tabs and line breaks inside a cell would break the layout, so control
    /// characters become spaces.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let cells = cells
            .into_iter()
            .map(|c| {
                c.into()
                    .chars()
                    .map(|ch| if ch.is_control() { ' ' } else { ch })
                    .collect()
            })
            .collect();
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = Vec::new();
        for row in &self.rows {
            // The last cell of a row is not part of any column.
            for (i, cell) in row.iter().enumerate().take(row.len().saturating_sub(1)) {
                let w = cell.chars().count();
                match widths.get_mut(i) {
                    Some(max) => *max = (*max).max(w),
                    None => widths.push(w),
                }
            }
        }
        let mut out = String::new();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                out.push_str(cell);
                if i + 1 < row.len() {
                    let pad = widths[i] - cell.chars().count() + PADDING;
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push('\n');
        }
        out
    }
}

/// The header of `list`.
pub const LIST_HEADER: [&str; 5] = ["ID", "STATUS", "ATTEMPTS", "METHOD", "TARGET"];

/// `[action] id status attempts/max method target`
pub fn delivery_row(action: Option<&str>, d: &DeliveryView) -> Vec<String> {
    let mut row = Vec::with_capacity(6);
    if let Some(action) = action {
        row.push(action.to_owned());
    }
    row.extend([
        d.id.clone(),
        d.status.to_string(),
        format!("{}/{}", d.attempts, d.max_attempts),
        d.method.clone(),
        d.target_url.clone(),
    ]);
    row
}

/// The lines printed under a delivery row; absent fields print nothing.
pub fn detail_lines(d: &DeliveryView, details: Details) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(err) = d.last_error.as_deref().filter(|e| !e.is_empty()) {
        lines.push(format!("last error: {err}"));
    }
    if details == Details::Full {
        if let Some(code) = d.last_error_code.as_deref().filter(|c| !c.is_empty()) {
            lines.push(format!("last error code: {code}"));
        }
        if let Some(at) = d.next_attempt_at.as_deref() {
            lines.push(format!("next attempt at: {at}"));
        }
    }
    lines
}

/// The header of `attempts`.
pub const ATTEMPTS_HEADER: [&str; 8] = [
    "CYCLE", "ATTEMPT", "STARTED", "OUTCOME", "HTTP", "CODE", "DURATION", "ERROR",
];

/// One attempt; `-` stands for an absent value.
pub fn attempt_row(a: &AttemptView) -> Vec<String> {
    let dash = || "-".to_owned();
    vec![
        a.cycle.to_string(),
        a.number.to_string(),
        a.started_at.clone(),
        a.outcome
            .clone()
            .unwrap_or_else(|| "in_progress".to_owned()),
        a.http_status.map_or_else(dash, |s| s.to_string()),
        a.error_code.clone().unwrap_or_else(dash),
        a.duration_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map_or_else(dash, |ms| {
                format_duration(std::time::Duration::from_millis(ms))
            }),
        a.error
            .as_deref()
            .map(short_error)
            .filter(|e| !e.is_empty())
            .unwrap_or_else(dash),
    ]
}

/// The first line of an error, cut to fit a table.
fn short_error(err: &str) -> String {
    let mut lines = err.trim().lines();
    let first = lines.next().unwrap_or("").trim_end();
    let more_lines = lines.next().is_some();
    if first.chars().count() > MAX_TABLE_ERROR_CHARS {
        let mut cut: String = first.chars().take(MAX_TABLE_ERROR_CHARS - 1).collect();
        cut.push('…');
        cut
    } else if more_lines {
        format!("{first} …")
    } else {
        first.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool_proto::DeliveryStatus;

    fn delivery() -> DeliveryView {
        serde_json::from_str(
            r#"{"id":"0190f3c2a1b27c4e9d0a5b6c7d8e9f01","targetUrl":"http://127.0.0.1:9090/events",
                "method":"POST","status":"pending","attempts":0,"maxAttempts":5,
                "createdAt":"2026-07-18T12:00:00Z","updatedAt":"2026-07-18T12:00:00Z"}"#,
        )
        .expect("valid delivery")
    }

    fn table(rows: &[&[&str]]) -> String {
        let mut t = Table::new();
        for r in rows {
            t.row(r.iter().copied());
        }
        t.render()
    }

    #[test]
    fn tabwriter_layout() {
        assert_eq!(table(&[]), "");
        assert_eq!(table(&[&["only"]]), "only\n");
        assert_eq!(table(&[&["a", "b", "c"]]), "a  b  c\n");
        assert_eq!(
            table(&[
                &["ID", "STATUS", "TARGET"],
                &["abc", "in_flight", "http://x/"]
            ]),
            "ID   STATUS     TARGET\nabc  in_flight  http://x/\n"
        );
        // The last column is never padded, however wide.
        assert_eq!(
            table(&[&["a", "long last cell"], &["bbb", "x"]]),
            "a    long last cell\nbbb  x\n"
        );
        // Widths count characters, not bytes.
        assert_eq!(table(&[&["é", "x"], &["ab", "y"]]), "é   x\nab  y\n");
        // Control characters cannot break the layout.
        assert_eq!(table(&[&["a\tb", "c\nd"]]), "a b  c d\n");
        // An empty cell still takes its padding.
        assert_eq!(table(&[&["", "x"]]), "  x\n");
    }

    #[test]
    fn single_delivery_row_matches_spoold() {
        let mut t = Table::new();
        t.row(delivery_row(Some("queued"), &delivery()));
        assert_eq!(
            t.render(),
            "queued  0190f3c2a1b27c4e9d0a5b6c7d8e9f01  pending  0/5  POST  \
             http://127.0.0.1:9090/events\n"
        );
    }

    #[test]
    fn list_table() {
        let mut second = delivery();
        second.id = "0190f3c2a1b27c4e9d0a5b6c7d8e9f02".into();
        second.status = DeliveryStatus::InFlight;
        second.attempts = 10;
        second.max_attempts = 10;
        second.method = "PUT".into();
        let mut t = Table::new();
        t.row(LIST_HEADER);
        t.row(delivery_row(None, &delivery()));
        t.row(delivery_row(None, &second));
        assert_eq!(
            t.render(),
            "ID                                STATUS     ATTEMPTS  METHOD  TARGET\n\
             0190f3c2a1b27c4e9d0a5b6c7d8e9f01  pending    0/5       POST    http://127.0.0.1:9090/events\n\
             0190f3c2a1b27c4e9d0a5b6c7d8e9f02  in_flight  10/10     PUT     http://127.0.0.1:9090/events\n"
        );
    }

    #[test]
    fn detail_lines_show_only_present_fields() {
        let mut d = delivery();
        assert!(detail_lines(&d, Details::Full).is_empty());
        d.last_error = Some("HTTP 503: busy".into());
        d.last_error_code = Some("http_status".into());
        d.next_attempt_at = Some("2026-07-18T12:00:01.5Z".into());
        assert_eq!(
            detail_lines(&d, Details::LastError),
            ["last error: HTTP 503: busy"]
        );
        assert_eq!(
            detail_lines(&d, Details::Full),
            [
                "last error: HTTP 503: busy",
                "last error code: http_status",
                "next attempt at: 2026-07-18T12:00:01.5Z"
            ]
        );
    }

    #[test]
    fn attempt_rows() {
        let a: AttemptView = serde_json::from_str(
            r#"{"cycle":1,"number":2,"startedAt":"2026-07-18T12:00:00Z","outcome":"retry",
                "httpStatus":503,"errorCode":"http_status","error":"HTTP 503: busy\nmore",
                "durationMs":1500}"#,
        )
        .expect("valid attempt");
        assert_eq!(
            attempt_row(&a),
            [
                "1",
                "2",
                "2026-07-18T12:00:00Z",
                "retry",
                "503",
                "http_status",
                "1s500ms",
                "HTTP 503: busy …"
            ]
        );
        let running: AttemptView =
            serde_json::from_str(r#"{"cycle":2,"number":1,"startedAt":"2026-07-18T12:00:00Z"}"#)
                .expect("valid attempt");
        assert_eq!(
            attempt_row(&running),
            [
                "2",
                "1",
                "2026-07-18T12:00:00Z",
                "in_progress",
                "-",
                "-",
                "-",
                "-"
            ]
        );
    }

    #[test]
    fn long_errors_are_cut() {
        let long = "x".repeat(200);
        let cut = short_error(&long);
        assert_eq!(cut.chars().count(), MAX_TABLE_ERROR_CHARS);
        assert!(cut.ends_with('…'));
        assert_eq!(short_error("  short  "), "short");
    }

    #[test]
    fn json_is_one_compact_line() {
        let mut buf = Vec::new();
        Output::new(&mut buf, true)
            .json(&delivery())
            .expect("in-memory write");
        let text = String::from_utf8(buf).expect("utf-8");
        assert!(text.starts_with(r#"{"id":"0190f3c2a1b27c4e9d0a5b6c7d8e9f01","targetUrl""#));
        assert!(text.ends_with("}\n") && text.lines().count() == 1, "{text}");
    }
}

//! What spoolctl prints: aligned tables laid out like Go's `text/tabwriter` (padding 2, as
//! spoold v0.1.0's spoolctl does), delivery and task rows, detail lines, and compact JSON. Scripts parse
//! this output, so its shape only changes on purpose.

use std::io::{self, Write};

use serde::Serialize;
use spool_proto::units::format_duration;
use spool_proto::{AttemptView, DeliveryView, TaskView};

/// Spaces after every cell except a row's last one, on top of the column width.
const PADDING: usize = 2;

/// Where a command writes its result, and in which form.
pub struct Output<'a> {
    out: &'a mut dyn Write,
    json: bool,
    /// The terminal's width, when writing to one: the last column of a table is cut to fit.
    width: Option<usize>,
}

impl<'a> Output<'a> {
    pub fn new(out: &'a mut dyn Write, json: bool) -> Self {
        Output {
            out,
            json,
            width: None,
        }
    }

    /// Fit tables to a terminal this wide (none when writing to a pipe or file: nothing is cut).
    pub fn fit_to(mut self, width: Option<usize>) -> Self {
        self.width = width;
        self
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
        self.out
            .write_all(table.render_within(self.width).as_bytes())
    }

    /// Bytes exactly as given (e.g. a completion script).
    pub fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    /// Hands what was written on now, not at the next newline: streamed output (a task's,
    /// which may be a progress bar without one) shows as it arrives.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn line(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "{text}")
    }

    /// A delivery as one table row prefixed with `action`, then its last error, if any (as
    /// spoold v0.1.0's spoolctl prints it; after a success, labelled as what came before).
    pub fn delivery(&mut self, action: &str, d: &DeliveryView) -> io::Result<()> {
        let mut table = Table::new();
        table.row(delivery_row(Some(action), d));
        self.table(&table)?;
        if let Some(err) = d.last_error.as_deref().filter(|e| !e.is_empty()) {
            self.line(&format!("{}: {err}", error_label(d)))?;
        }
        Ok(())
    }

    /// A task as one table row prefixed with `action`, then its error, if any, the way
    /// [`Self::delivery`] prints a delivery.
    pub fn task(&mut self, action: &str, t: &TaskView) -> io::Result<()> {
        let mut table = Table::new();
        table.row(task_row(Some(action), t));
        self.table(&table)?;
        if let Some(err) = t.error.as_deref().filter(|e| !e.is_empty()) {
            self.line(&format!("last error: {err}"))?;
        }
        Ok(())
    }
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
        self.render_within(None)
    }

    /// Like [`Self::render`], with each row's last cell cut (at a space, with `…`) so that the
    /// row fits in `width` characters; never shorter than the cell's first word, so an id or an
    /// address in it stays whole for copy and paste.
    pub fn render_within(&self, width: Option<usize>) -> String {
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
            let mut used = 0;
            for (i, cell) in row.iter().enumerate() {
                if i + 1 < row.len() {
                    out.push_str(cell);
                    let pad = widths[i] - cell.chars().count() + PADDING;
                    out.extend(std::iter::repeat_n(' ', pad));
                    used += widths[i] + PADDING;
                } else {
                    let room = width.map(|w| w.saturating_sub(used));
                    out.push_str(&fit(cell, room));
                }
            }
            out.push('\n');
        }
        out
    }
}

/// `text` cut to `room` characters at a space, ending in `…`; at least its first word.
fn fit(text: &str, room: Option<usize>) -> String {
    let Some(room) = room.filter(|r| text.chars().count() > *r) else {
        return text.to_owned();
    };
    // Room for " …" after the cut.
    let keep: String = text.chars().take(room.saturating_sub(2)).collect();
    let first_word = text.split(' ').next().unwrap_or(text);
    let cut = match keep.rfind(' ') {
        Some(space) if space >= first_word.len() => keep[..space].trim_end().to_owned(),
        _ => first_word.to_owned(),
    };
    if cut.len() >= text.len() {
        return text.to_owned();
    }
    format!("{cut} …")
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
        attempts(d),
        d.method.clone(),
        d.target_url.clone(),
    ]);
    row
}

/// `charged/max`, and the interrupted attempts (not charged) beside it: `3/8 (+1 interrupted)`.
/// The first number never exceeds the second.
/// What a delivery's `lastError` is called: it explains the current state, unless the
/// delivery has succeeded since (then it is what an earlier attempt met).
pub fn error_label(d: &DeliveryView) -> &'static str {
    if d.status == spool_proto::DeliveryStatus::Succeeded {
        "earlier error (before it succeeded)"
    } else {
        "last error"
    }
}

pub fn attempts(d: &DeliveryView) -> String {
    let interrupted = d.interrupted_attempts.unwrap_or(0);
    let charged = format!(
        "{}/{}",
        d.attempts.saturating_sub(interrupted),
        d.max_attempts
    );
    if interrupted > 0 {
        format!("{charged} (+{interrupted} interrupted)")
    } else {
        charged
    }
}

/// The header of `task list`: a task row without the action, and its parameters last.
pub const TASK_LIST_HEADER: [&str; 5] = ["ID", "STATUS", "ATTEMPTS", "TYPE", "PARAMS"];

/// `[action] id status attempt/max type` (as `task submit`, `wait`, `cancel`, `retry` print it).
pub fn task_row(action: Option<&str>, t: &TaskView) -> Vec<String> {
    let mut row = Vec::with_capacity(5);
    if let Some(action) = action {
        row.push(action.to_owned());
    }
    row.extend([
        t.id.clone(),
        t.status.as_str().to_owned(),
        format!("{}/{}", t.attempt, t.max_attempts),
        t.task_type.clone(),
    ]);
    row
}

/// A row of `task list`: [`task_row`] and the parameters as `key=value`, `-` for none.
pub fn task_list_row(t: &TaskView) -> Vec<String> {
    let mut row = task_row(None, t);
    row.push(task_params(t));
    row
}

/// `key=value key=value`, in name order; `-` for none.
pub fn task_params(t: &TaskView) -> String {
    if t.params.is_empty() {
        return "-".to_owned();
    }
    let pairs: Vec<String> = t.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(" ")
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

/// The first line of an error (a table row has one line; `…` says there was more).
pub fn short_error(err: &str) -> String {
    let mut lines = err.trim().lines();
    let first = lines.next().unwrap_or("").trim_end();
    if lines.next().is_some() {
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
                &["abc", "in_flight", "http://127.0.0.1/"]
            ]),
            "ID   STATUS     TARGET\nabc  in_flight  http://127.0.0.1/\n"
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
    fn attempts_never_exceed_their_maximum() {
        let mut d = delivery();
        d.attempts = 9;
        d.max_attempts = 8;
        d.interrupted_attempts = Some(2);
        assert_eq!(attempts(&d), "7/8 (+2 interrupted)");
        d.interrupted_attempts = None;
        d.attempts = 3;
        assert_eq!(attempts(&d), "3/8");
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
    fn long_errors_are_kept_whole_unless_a_terminal_is_narrower() {
        let error = "connect to 127.0.0.1:9: connection refused by the peer";
        assert_eq!(short_error(&"x".repeat(200)).len(), 200);
        assert_eq!(short_error("  short  "), "short");
        let mut t = Table::new();
        t.row(["1", "retry", error]);
        // Piped or wide: whole.
        assert_eq!(t.render_within(None), format!("1  retry  {error}\n"));
        assert_eq!(t.render_within(Some(200)), format!("1  retry  {error}\n"));
        // Narrow: cut between words.
        assert_eq!(
            t.render_within(Some(47)),
            "1  retry  connect to 127.0.0.1:9: connection …\n"
        );
        // Never inside the first word, however narrow.
        assert_eq!(t.render_within(Some(12)), "1  retry  connect …\n");
        assert_eq!(
            fit("0190f3c2a1b27c4e9d0a5b6c7d8e9f01", Some(5)),
            "0190f3c2a1b27c4e9d0a5b6c7d8e9f01"
        );
    }

    fn task() -> TaskView {
        serde_json::from_str(
            r#"{"id":"0190f3c2a1b27c4e9d0a5b6c7d8e9f01","type":"backup","status":"timed_out",
                "attempt":1,"maxAttempts":3,"params":{"db":"one","mode":"full"},"scope":"default",
                "createdAt":"2026-07-18T12:00:00Z","retryable":false,"completedSteps":[],
                "error":"ran longer than its timeout of 500ms"}"#,
        )
        .expect("valid task")
    }

    #[test]
    fn task_rows() {
        let t = task();
        let mut table = Table::new();
        table.row(task_row(Some("submitted"), &t));
        assert_eq!(
            table.render(),
            "submitted  0190f3c2a1b27c4e9d0a5b6c7d8e9f01  timed_out  1/3  backup\n"
        );
        let mut table = Table::new();
        table.row(TASK_LIST_HEADER);
        table.row(task_list_row(&t));
        assert_eq!(
            table.render(),
            "ID                                STATUS     ATTEMPTS  TYPE    PARAMS\n\
             0190f3c2a1b27c4e9d0a5b6c7d8e9f01  timed_out  1/3       backup  db=one mode=full\n"
        );
        let mut buf = Vec::new();
        Output::new(&mut buf, false)
            .task("wait", &t)
            .expect("in-memory write");
        assert_eq!(
            String::from_utf8(buf).expect("utf-8"),
            "wait  0190f3c2a1b27c4e9d0a5b6c7d8e9f01  timed_out  1/3  backup\n\
             last error: ran longer than its timeout of 500ms\n"
        );
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

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
    /// Status cells in colour (on a terminal that has not asked for none).
    colour: bool,
}

impl<'a> Output<'a> {
    pub fn new(out: &'a mut dyn Write, json: bool) -> Self {
        Output {
            out,
            json,
            width: None,
            colour: false,
        }
    }

    /// Fit tables to a terminal this wide (none when writing to a pipe or file: nothing is cut).
    pub fn fit_to(mut self, width: Option<usize>) -> Self {
        self.width = width;
        self
    }

    /// Paint status cells (succeeded green, failed red, needing a person yellow, …).
    pub fn coloured(mut self, colour: bool) -> Self {
        self.colour = colour;
        self
    }

    /// True when status cells are painted.
    pub fn is_coloured(&self) -> bool {
        self.colour
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
            .write_all(table.render_styled(self.width, self.colour).as_bytes())
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
    rows: Vec<Vec<Cell>>,
}

/// One cell of a [`Table`]: its text, and how to paint it when colour is on.
#[derive(Debug, Clone)]
pub struct Cell {
    text: String,
    paint: Option<Paint>,
}

impl Cell {
    /// A status word, painted by what it means.
    pub fn status(word: &str) -> Cell {
        Cell {
            text: word.to_owned(),
            paint: Paint::of_status(word),
        }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell { text, paint: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell::from(text.to_owned())
    }
}

/// What a coloured cell says at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paint {
    /// Done as asked: green.
    Good,
    /// Failed for good: red.
    Bad,
    /// Needs a person or a reconciliation: yellow.
    Attention,
    /// Under way: cyan.
    Busy,
    /// Stopped on purpose: dim.
    Quiet,
}

impl Paint {
    /// The paint of a delivery's or task's status; none for waiting work.
    pub fn of_status(word: &str) -> Option<Paint> {
        Some(match word {
            "succeeded" => Paint::Good,
            "failed" | "timed_out" => Paint::Bad,
            "unknown" | "manual_review" | "interrupted" => Paint::Attention,
            "in_flight" | "running" => Paint::Busy,
            "canceled" => Paint::Quiet,
            _ => return None,
        })
    }

    /// The SGR sequence that starts the paint (`\x1b[0m` ends it).
    fn sgr(self) -> &'static str {
        match self {
            Paint::Good => "\x1b[32m",
            Paint::Bad => "\x1b[31m",
            Paint::Attention => "\x1b[33m",
            Paint::Busy => "\x1b[36m",
            Paint::Quiet => "\x1b[2m",
        }
    }
}

/// Whether to write colour to stdout: a terminal, not `TERM=dumb`, and no `NO_COLOR` (set and
/// not empty; <https://no-color.org>).
pub fn colour_wanted() -> bool {
    use std::io::IsTerminal;
    let set = |name| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    io::stdout().is_terminal()
        && !set("NO_COLOR")
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
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
        S: Into<Cell>,
    {
        let cells = cells
            .into_iter()
            .map(|c| {
                let mut cell = c.into();
                if cell.text.chars().any(char::is_control) {
                    cell.text = cell
                        .text
                        .chars()
                        .map(|ch| if ch.is_control() { ' ' } else { ch })
                        .collect();
                }
                cell
            })
            .collect();
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        self.render_styled(None, false)
    }

    /// Like [`Self::render`], with each row's last cell cut (at a space, with `…`) so that the
    /// row fits in `width` characters (never shorter than the cell's first word, so an id or an
    /// address in it stays whole for copy and paste), and painted cells in colour when `colour`
    /// is set (the padding stays outside the colour, so columns line up as without it).
    pub fn render_styled(&self, width: Option<usize>, colour: bool) -> String {
        let mut widths: Vec<usize> = Vec::new();
        for row in &self.rows {
            // The last cell of a row is not part of any column.
            for (i, cell) in row.iter().enumerate().take(row.len().saturating_sub(1)) {
                let w = cell.text.chars().count();
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
                let last = i + 1 == row.len();
                let text = if last {
                    fit(&cell.text, width.map(|w| w.saturating_sub(used)))
                } else {
                    cell.text.clone()
                };
                match cell.paint.filter(|_| colour) {
                    Some(paint) => {
                        out.push_str(paint.sgr());
                        out.push_str(&text);
                        out.push_str("\x1b[0m");
                    }
                    None => out.push_str(&text),
                }
                if !last {
                    let pad = widths[i] - cell.text.chars().count() + PADDING;
                    out.extend(std::iter::repeat_n(' ', pad));
                    used += widths[i] + PADDING;
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
pub const LIST_HEADER: [&str; 6] = ["ID", "STATUS", "ATTEMPTS", "UPDATED", "METHOD", "TARGET"];

/// A row of `list`: [`delivery_row`] with when the delivery last changed, as an age from `now`
/// (milliseconds since the epoch).
pub fn delivery_list_row(d: &DeliveryView, now: i64) -> Vec<Cell> {
    let mut row = delivery_row(None, d);
    row.insert(3, Cell::from(ago(&d.updated_at, now)));
    row
}

/// How long before `now` the RFC 3339 time `at` was, in its largest whole unit: `now`, `42s
/// ago`, `5m ago`, `3h ago`, `12d ago`; a time that does not parse is shown as it is.
pub fn ago(at: &str, now: i64) -> String {
    let Ok(then) = spool_proto::units::parse_time(at) else {
        return at.to_owned();
    };
    let secs = (now - then).max(0) / 1000;
    match secs {
        0 => "now".to_owned(),
        1..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// The wall clock in milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `[action] id status attempts/max method target`
pub fn delivery_row(action: Option<&str>, d: &DeliveryView) -> Vec<Cell> {
    let mut row = Vec::with_capacity(6);
    if let Some(action) = action {
        row.push(Cell::from(action));
    }
    row.extend([
        Cell::from(d.id.clone()),
        Cell::status(&d.status.to_string()),
        Cell::from(attempts(d)),
        Cell::from(d.method.clone()),
        Cell::from(d.target_url.clone()),
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

/// The header of `task list`: a task row without the action, when it last changed, and its
/// parameters last.
pub const TASK_LIST_HEADER: [&str; 6] = ["ID", "STATUS", "ATTEMPTS", "UPDATED", "TYPE", "PARAMS"];

/// `[action] id status attempt/max type` (as `task submit`, `wait`, `cancel`, `retry` print it).
pub fn task_row(action: Option<&str>, t: &TaskView) -> Vec<Cell> {
    let mut row = Vec::with_capacity(5);
    if let Some(action) = action {
        row.push(Cell::from(action));
    }
    row.extend([
        Cell::from(t.id.clone()),
        Cell::status(t.status.as_str()),
        Cell::from(format!("{}/{}", t.attempt, t.max_attempts)),
        Cell::from(t.task_type.clone()),
    ]);
    row
}

/// A row of `task list`: [`task_row`], the age of its last change (end, start or creation)
/// from `now`, and the parameters as `key=value`, `-` for none.
pub fn task_list_row(t: &TaskView, now: i64) -> Vec<Cell> {
    let mut row = task_row(None, t);
    let changed = t
        .finished_at
        .as_deref()
        .or(t.started_at.as_deref())
        .unwrap_or(&t.created_at);
    row.insert(3, Cell::from(ago(changed, now)));
    row.push(Cell::from(task_params(t)));
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
        second.updated_at = "2026-07-18T11:00:00Z".into();
        let now = spool_proto::units::parse_time("2026-07-18T12:00:00.5Z").expect("a time");
        t.row(LIST_HEADER);
        t.row(delivery_list_row(&delivery(), now));
        t.row(delivery_list_row(&second, now));
        assert_eq!(
            t.render(),
            "ID                                STATUS     ATTEMPTS  UPDATED  METHOD  TARGET\n\
             0190f3c2a1b27c4e9d0a5b6c7d8e9f01  pending    0/5       now      POST    http://127.0.0.1:9090/events\n\
             0190f3c2a1b27c4e9d0a5b6c7d8e9f02  in_flight  10/10     1h ago   PUT     http://127.0.0.1:9090/events\n"
        );
    }

    #[test]
    fn ages_in_their_largest_unit() {
        let at = "2026-07-18T12:00:00Z";
        let then = spool_proto::units::parse_time(at).expect("a time");
        let age = |secs: i64| ago(at, then + secs * 1000);
        assert_eq!(age(-5), "now", "a clock behind the server's");
        assert_eq!(age(0), "now");
        assert_eq!(age(59), "59s ago");
        assert_eq!(age(60), "1m ago");
        assert_eq!(age(3599), "59m ago");
        assert_eq!(age(7200), "2h ago");
        assert_eq!(age(86_400 * 3 + 5), "3d ago");
        assert_eq!(ago("yesterday", then), "yesterday");
        let colored = {
            let mut t = Table::new();
            t.row(["A", "B", "C"]);
            t.row([Cell::from("x"), Cell::status("failed"), Cell::from("y")]);
            t.render_styled(None, true)
        };
        assert_eq!(colored, "A  B       C\nx  \u{1b}[31mfailed\u{1b}[0m  y\n");
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
        assert_eq!(t.render_styled(None, false), format!("1  retry  {error}\n"));
        assert_eq!(
            t.render_styled(Some(200), false),
            format!("1  retry  {error}\n")
        );
        // Narrow: cut between words.
        assert_eq!(
            t.render_styled(Some(47), false),
            "1  retry  connect to 127.0.0.1:9: connection …\n"
        );
        // Never inside the first word, however narrow.
        assert_eq!(t.render_styled(Some(12), false), "1  retry  connect …\n");
        assert_eq!(
            fit("0190f3c2a1b27c4e9d0a5b6c7d8e9f01", Some(5)),
            "0190f3c2a1b27c4e9d0a5b6c7d8e9f01"
        );
    }

    fn task() -> TaskView {
        serde_json::from_str(
            r#"{"id":"0190f3c2a1b27c4e9d0a5b6c7d8e9f01","type":"backup","status":"timed_out",
                "attempt":1,"maxAttempts":3,"params":{"db":"one","mode":"full"},"scope":"default",
                "createdAt":"2026-07-18T12:00:00Z","finishedAt":"2026-07-18T12:00:05Z",
                "retryable":false,"completedSteps":[],
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
        let finished = t.finished_at.as_deref().expect("finished");
        let now = spool_proto::units::parse_time(finished).expect("a time") + 90_000;
        table.row(task_list_row(&t, now));
        assert_eq!(
            table.render(),
            "ID                                STATUS     ATTEMPTS  UPDATED  TYPE    PARAMS\n\
             0190f3c2a1b27c4e9d0a5b6c7d8e9f01  timed_out  1/3       1m ago   backup  db=one mode=full\n"
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

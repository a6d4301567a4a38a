//! The results: every measurement with its value from each run, summarised as median and
//! spread; printed as a table and written as a JSON document together with what they were
//! measured on.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};
use serde::Serialize;

use crate::machine::{Filesystem, Machine};
use crate::plan::Plan;
use crate::summary::Spread;

/// Measurements in the order they were first recorded.
#[derive(Debug, Default)]
pub struct Results {
    entries: Vec<Entry>,
    /// The store backend and daemon count of each scenario that runs daemons.
    backends: Vec<Backend>,
    /// Measurements shown as a multiple of their floor.
    floors: Vec<FloorLink>,
    notes: Vec<String>,
    errors: Vec<String>,
}

/// What a scenario's daemons ran on.
#[derive(Debug, Clone)]
struct Backend {
    scenario: String,
    kind: &'static str,
    hosts: usize,
}

/// A measurement and the measurement of its floor (same scenario and case): the table and
/// the JSON document show the one's median as a multiple of the other's.
#[derive(Debug, Clone)]
struct FloorLink {
    scenario: String,
    case: String,
    metric: String,
    floor_metric: String,
}

/// One measurement (scenario, case, metric) and its value in each run.
#[derive(Debug, Clone)]
struct Entry {
    scenario: String,
    case: String,
    metric: String,
    unit: String,
    runs: Vec<f64>,
}

/// A measurement as written to JSON.
#[derive(Debug, Serialize)]
pub struct EntryJson<'a> {
    pub scenario: &'a str,
    /// `sqlite` or `postgres`, for scenarios that run daemons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<&'a str>,
    /// Daemons sharing the store, for scenarios that run daemons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hosts: Option<usize>,
    pub case: &'a str,
    pub metric: &'a str,
    pub unit: &'a str,
    #[serde(flatten)]
    pub summary: Option<Spread>,
    pub runs: &'a [f64],
    /// The median as a multiple of the floor's median (the same scenario and case).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_floor: Option<f64>,
    /// The metric holding that floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_metric: Option<&'a str>,
}

/// Everything besides the numbers that the JSON document carries.
#[derive(Debug, Serialize)]
pub struct Context {
    pub tool: String,
    pub date: String,
    pub command: Vec<String>,
    pub git_commit: Option<String>,
    pub machine: Machine,
    pub data_dir: PathBuf,
    pub data_filesystem: Filesystem,
    pub spoold_path: PathBuf,
    pub spoold_version: String,
    /// The store `enqueue` and `e2e` ran on.
    pub backend: BackendContext,
    /// The build profile of this benchmark binary (`release` or `debug`).
    pub bench_profile: &'static str,
    pub plan: Plan,
}

/// The store backend of an invocation, for the JSON document.
#[derive(Debug, Serialize)]
pub struct BackendContext {
    /// `sqlite` or `postgres`.
    pub kind: &'static str,
    /// Daemons per run, sharing one database.
    pub hosts: usize,
    /// The PostgreSQL URL given (password hidden); each run used a fresh database on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
}

#[derive(Serialize)]
struct Document<'a> {
    #[serde(flatten)]
    context: &'a Context,
    elapsed_seconds: f64,
    results: Vec<EntryJson<'a>>,
    notes: &'a [String],
    errors: &'a [String],
}

impl Results {
    /// Add one run's value of a measurement.
    pub fn record(&mut self, scenario: &str, case: &str, metric: &str, unit: &str, value: f64) {
        let found = self
            .entries
            .iter_mut()
            .find(|e| e.scenario == scenario && e.case == case && e.metric == metric);
        match found {
            Some(e) => e.runs.push(value),
            None => self.entries.push(Entry {
                scenario: scenario.to_owned(),
                case: case.to_owned(),
                metric: metric.to_owned(),
                unit: unit.to_owned(),
                runs: vec![value],
            }),
        }
    }

    /// Name the store backend and daemon count of `scenario`'s daemons: each of its entries
    /// carries them in the JSON document.
    pub fn describe(&mut self, scenario: &str, kind: &'static str, hosts: usize) {
        self.backends.retain(|b| b.scenario != scenario);
        self.backends.push(Backend {
            scenario: scenario.to_owned(),
            kind,
            hosts,
        });
    }

    /// Show `metric` of `scenario`/`case` as a multiple of `floor_metric` of the same scenario
    /// and case (by medians), in the table's `× floor` column and as `x_floor` in JSON.
    pub fn compare_to_floor(
        &mut self,
        scenario: &str,
        case: &str,
        metric: &str,
        floor_metric: &str,
    ) {
        let known = self
            .floors
            .iter()
            .any(|f| f.scenario == scenario && f.case == case && f.metric == metric);
        if !known {
            self.floors.push(FloorLink {
                scenario: scenario.to_owned(),
                case: case.to_owned(),
                metric: metric.to_owned(),
                floor_metric: floor_metric.to_owned(),
            });
        }
    }

    /// `e`'s median as a multiple of its floor's, and the floor's metric; `None` without a
    /// floor, or with a floor of zero (too little CPU for the clock ticks to show).
    fn x_floor(&self, e: &Entry) -> Option<(f64, &str)> {
        let link = self
            .floors
            .iter()
            .find(|f| f.scenario == e.scenario && f.case == e.case && f.metric == e.metric)?;
        let floor = Spread::of(self.runs(&e.scenario, &e.case, &link.floor_metric)?)?.median;
        let own = Spread::of(&e.runs)?.median;
        (floor > 0.0).then(|| (own / floor, link.floor_metric.as_str()))
    }

    /// A remark printed under the table and kept in the JSON document.
    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// A scenario that failed; the run goes on with the next one.
    pub fn error(&mut self, error: impl Into<String>) {
        self.errors.push(error.into());
    }

    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// The runs of one measurement, for checks and tests.
    pub fn runs(&self, scenario: &str, case: &str, metric: &str) -> Option<&[f64]> {
        self.entries
            .iter()
            .find(|e| e.scenario == scenario && e.case == case && e.metric == metric)
            .map(|e| e.runs.as_slice())
    }

    /// The table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "scenario", "case", "metric", "unit", "median", "min", "max", "spread", "runs",
            "× floor",
        ]);
        for e in &self.entries {
            let Some(s) = Spread::of(&e.runs) else {
                continue;
            };
            table.add_row(vec![
                e.scenario.clone(),
                e.case.clone(),
                e.metric.clone(),
                e.unit.clone(),
                format_value(s.median),
                format_value(s.min),
                format_value(s.max),
                format!("{:.1}%", s.spread_pct),
                e.runs.len().to_string(),
                self.x_floor(e)
                    .map_or_else(String::new, |(x, _)| format!("{x:.2}×")),
            ]);
        }
        for col in 4..=9 {
            if let Some(c) = table.column_mut(col) {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        let mut out = table.to_string();
        for note in &self.notes {
            out.push_str("\n- ");
            out.push_str(note);
        }
        for error in &self.errors {
            out.push_str("\nERROR: ");
            out.push_str(error);
        }
        out
    }

    /// Write the JSON document to `path`, creating its directory.
    pub fn write_json(
        &self,
        path: &Path,
        context: &Context,
        elapsed_seconds: f64,
    ) -> anyhow::Result<()> {
        let doc = Document {
            context,
            elapsed_seconds,
            results: self
                .entries
                .iter()
                .map(|e| {
                    let backend = self.backends.iter().find(|b| b.scenario == e.scenario);
                    EntryJson {
                        scenario: &e.scenario,
                        backend: backend.map(|b| b.kind),
                        hosts: backend.map(|b| b.hosts),
                        case: &e.case,
                        metric: &e.metric,
                        unit: &e.unit,
                        summary: Spread::of(&e.runs),
                        runs: &e.runs,
                        x_floor: self.x_floor(e).map(|(x, _)| x),
                        floor_metric: self.x_floor(e).map(|(_, m)| m),
                    }
                })
                .collect(),
            notes: &self.notes,
            errors: &self.errors,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let mut text = serde_json::to_vec_pretty(&doc).context("encode results")?;
        text.push(b'\n');
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
    }
}

/// Three significant digits or so, without exponent notation.
fn format_value(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_accumulate_per_measurement() {
        let mut r = Results::default();
        r.record("enqueue", "c=1", "throughput", "req/s", 10.0);
        r.record("enqueue", "c=16", "throughput", "req/s", 20.0);
        r.record("enqueue", "c=1", "throughput", "req/s", 12.0);
        assert_eq!(
            r.runs("enqueue", "c=1", "throughput"),
            Some(&[10.0, 12.0][..])
        );
        assert_eq!(r.runs("enqueue", "c=16", "throughput"), Some(&[20.0][..]));
        let table = r.table();
        assert!(table.contains("c=16"), "{table}");
        assert!(table.contains("11.0"), "{table}");
    }

    #[test]
    fn a_measurement_is_shown_as_a_multiple_of_its_floor() {
        let mut r = Results::default();
        for (cpu, floor) in [(60.0, 20.0), (90.0, 30.0), (75.0, 25.0)] {
            r.record("enqueue", "c=64", "daemon CPU per request", "µs", cpu);
            r.record("enqueue", "c=64", "HTTP floor", "µs", floor);
        }
        r.record("enqueue", "c=1", "daemon CPU per request", "µs", 80.0);
        r.record("enqueue", "c=1", "HTTP floor", "µs", 0.0);
        r.compare_to_floor("enqueue", "c=64", "daemon CPU per request", "HTTP floor");
        r.compare_to_floor("enqueue", "c=1", "daemon CPU per request", "HTTP floor");
        let entry = |case: &str| {
            r.entries
                .iter()
                .find(|e| e.case == case && e.metric == "daemon CPU per request")
                .expect("recorded")
                .clone()
        };
        // Medians 75 and 25.
        assert_eq!(r.x_floor(&entry("c=64")), Some((3.0, "HTTP floor")));
        // A floor too small for the clock ticks: no multiple.
        assert_eq!(r.x_floor(&entry("c=1")), None);
        let table = r.table();
        assert!(table.contains("× floor"), "{table}");
        assert!(table.contains("3.00×"), "{table}");
    }

    #[test]
    fn values_keep_about_three_digits() {
        let check = |v: f64, want: &str| assert_eq!(format_value(v), want, "{v}");
        check(12345.6, "12346");
        check(12.345, "12.3");
        check(1.2345, "1.23");
        check(0.012345, "0.012");
        check(0.0, "0");
    }
}

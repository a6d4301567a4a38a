//! Ops tasks: pre-declared commands run as durable tasks. `types` holds the declared types (from
//! the configuration file), `submission` turns a submission into a task to store, `runner`
//! claims and runs their attempts, each through a supervisor process of its own
//! (`supervisor`), `exec` is the only place that spawns processes and `processes` the only one
//! that signals them. The store keeps tasks, attempts and transitions and enforces the state
//! machine; nothing here is remembered only in memory.

pub mod bulk;
pub mod cgroup;
pub mod exec;
pub mod output;
pub mod processes;
pub mod runner;
pub mod submission;
pub mod supervision;
pub mod supervisor;
pub mod types;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

pub use types::{TaskType, TypeError, TypeSpec};

/// Every declared task type, by name.
#[derive(Debug, Clone, Default)]
pub struct TaskTypes(BTreeMap<String, TaskType>);

/// The declared task types as they are now, shared by the API and the runner; a reload
/// (SIGHUP) replaces them whole. A reader takes the current set once per decision
/// ([`Declared::now`]), so it never mixes two of them.
#[derive(Debug, Default)]
pub struct Declared {
    types: RwLock<Arc<TaskTypes>>,
    changed: tokio::sync::Notify,
}

impl Declared {
    pub fn new(types: Arc<TaskTypes>) -> Declared {
        Declared {
            types: RwLock::new(types),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// The current set.
    pub fn now(&self) -> Arc<TaskTypes> {
        match self.types.read() {
            Ok(types) => Arc::clone(&types),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Put `types` in place of the current set, and wake whoever waits on [`Self::changed`].
    pub fn replace(&self, types: Arc<TaskTypes>) {
        match self.types.write() {
            Ok(mut current) => *current = types,
            Err(poisoned) => *poisoned.into_inner() = types,
        }
        self.changed.notify_waiters();
    }

    /// Resolves at the next [`Self::replace`].
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

impl TaskTypes {
    /// Check the `[tasks.*]` tables of `file`.
    pub fn from_specs(
        file: &Path,
        specs: BTreeMap<String, TypeSpec>,
    ) -> Result<TaskTypes, TypeError> {
        specs
            .into_iter()
            .map(|(name, spec)| TaskType::from_spec(file, &name, spec).map(|t| (name, t)))
            .collect::<Result<_, _>>()
            .map(TaskTypes)
    }

    pub fn get(&self, name: &str) -> Option<&TaskType> {
        self.0.get(name)
    }

    pub fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &TaskType> {
        self.0.values()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What a type names on this machine that is not there (or not usable) now: its program
    /// (absolute, a file with an execute bit), its `working_dir`, its secret files. Checked at
    /// start and on reload, so that a typo shows then, not at the first submission.
    pub fn missing_files(&self) -> Vec<String> {
        use std::os::unix::fs::PermissionsExt;
        let mut problems = Vec::new();
        for t in self.0.values() {
            let name = &t.name;
            if let Some(program) = t.command.first() {
                match std::fs::metadata(program) {
                    Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {}
                    Ok(_) => problems.push(format!(
                        "[tasks.{name}] command: {program} is not an executable file"
                    )),
                    Err(e) => problems.push(format!("[tasks.{name}] command: {program}: {e}")),
                }
            }
            if let Some(dir) = &t.working_dir {
                if !dir.is_dir() {
                    problems.push(format!(
                        "[tasks.{name}] working_dir: {} is not a directory",
                        dir.display()
                    ));
                }
            }
            for (var, file) in &t.secret_env {
                if let Err(e) = std::fs::File::open(file) {
                    problems.push(format!(
                        "[tasks.{name}] secret_env.{var}: {}: {e}",
                        file.display()
                    ));
                }
            }
        }
        problems
    }
}

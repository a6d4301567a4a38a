//! Ops tasks: pre-declared commands run as durable tasks. `types` holds the declared types (from
//! the configuration file), `runner` claims and runs their attempts, `exec` is the only place
//! that spawns processes. The store keeps tasks, attempts and transitions and enforces the
//! state machine; nothing here is remembered only in memory.

pub mod cgroup;
pub mod exec;
pub mod output;
pub mod processes;
pub mod runner;
pub mod types;

use std::collections::BTreeMap;
use std::path::Path;

pub use types::{TaskType, TypeError, TypeSpec};

/// Every declared task type, by name.
#[derive(Debug, Clone, Default)]
pub struct TaskTypes(BTreeMap<String, TaskType>);

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
}

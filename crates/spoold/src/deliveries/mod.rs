//! Deliveries: outbound HTTP requests made durable and sent at least once — or at most once,
//! with reconciliation. `submission` turns a create into a delivery; `scheduler` claims due
//! work within the concurrency limits; `deliver` runs one attempt through `outbound` (the only
//! HTTP client) and classifies it with `retry`; `reconcile` asks targets about `unknown`
//! outcomes; `retention` purges finished deliveries; `activity` keeps recent results for the
//! operator's overview.

pub mod activity;
pub mod bulk;
pub mod deliver;
pub mod gone;
pub mod outbound;
pub mod reconcile;
pub mod retention;
pub mod retry;
pub mod scheduler;
pub mod submission;
pub mod targets;

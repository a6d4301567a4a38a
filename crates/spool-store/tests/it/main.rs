//! The store's one integration-test binary.
//!
//! `conformance` states the store contract once, against the backend-neutral [`spool_store::Store`];
//! each backend module instantiates it with `conformance_suite!` and adds the checks that only
//! make sense for that backend (files, locks, pragmas).

mod conformance;
mod postgres;
mod sqlite;

//! Integration tests of spool-bench: the smoke suite, end to end, against the debug `spoold`,
//! on SQLite and (with `SPOOLD_TEST_PG_URL`) on PostgreSQL with two hosts.

mod postgres;
mod smoke;

//! Integration tests of spool-bench: the smoke suite, end to end, against the debug `spoold`.

mod smoke;

//! The testkit's own tests: the receiver and the API client against each other, and the daemon
//! runner against a stand-in shell script (the real `spoold` is exercised by its own tests).

mod api;
mod daemon;
mod receiver;
mod remote;

//! Structured logs on stderr: JSON lines (one object per event, fields at the top level), or
//! human-readable text — by default text on a terminal (coloured unless `NO_COLOR` is set) and
//! JSON anywhere else. The level comes from `SPOOLD_LOG` (default `info`).
//!
//! Lines are not written by the thread that logs them. Each event's line is appended to a shared
//! buffer and one writer thread hands what has gathered to stderr a moment later
//! ([`GATHER`]), so a busy daemon makes one `write` — and wakes whoever reads the pipe or the
//! journal socket once — for many lines instead of one per line (at a few thousand deliveries a
//! second, writing each line cost about a tenth of the daemon's CPU). Nothing is dropped: a
//! logging thread waits while the buffer holds [`MAX_BUFFERED`] bytes. The price: a line reaches
//! stderr up to [`GATHER`] after its event, and a daemon killed with SIGKILL loses the lines of
//! its last moment. Every other exit writes them out first ([`LogGuard`]).

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// How long the writer thread lets lines gather after the first one before it writes them.
pub const GATHER: Duration = Duration::from_millis(2);

/// Bytes waiting to be written at which a logging thread waits for the writer.
pub const MAX_BUFFERED: usize = 1 << 20;

/// Install the global subscriber and start the writer thread. Call once, from `main`, and keep
/// the guard until the end: dropping it writes out every line logged so far.
pub fn init(format: LogFormat) -> LogGuard {
    let terminal = std::io::stderr().is_terminal();
    let format = match format {
        LogFormat::Auto if terminal => LogFormat::Text,
        LogFormat::Auto => LogFormat::Json,
        chosen => chosen,
    };
    // https://no-color.org: set and not empty.
    let colour = terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let (writer, guard) = gathering(std::io::stderr());
    let filter = EnvFilter::try_from_env("SPOOLD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
        LogFormat::Text | LogFormat::Auto => builder.with_ansi(colour).init(),
    }
    guard
}

/// A writer that appends to the shared buffer, and the guard of the thread that drains it into
/// `out`.
fn gathering(out: impl Write + Send + 'static) -> (Gathering, LogGuard) {
    let shared = Arc::new(Shared::default());
    let thread = std::thread::Builder::new()
        .name("spoold-log".into())
        .spawn({
            let shared = shared.clone();
            move || shared.drain(out)
        });
    // Without the thread (the OS refused one), lines are written as they are logged.
    let direct = thread.is_err();
    shared.lock().closed = direct;
    let guard = LogGuard {
        shared: shared.clone(),
        thread: thread.ok(),
    };
    (Gathering { shared }, guard)
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when the buffer stops being empty, and when the guard closes it.
    filled: Condvar,
    /// Signalled when the writer has taken the buffer.
    drained: Condvar,
}

#[derive(Default)]
struct State {
    buf: Vec<u8>,
    /// No writer thread (any more): lines go straight to stderr.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A thread that panicked while holding the lock left at worst a partial line behind.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn append(&self, line: &[u8]) {
        let mut state = self.lock();
        while !state.closed && state.buf.len() >= MAX_BUFFERED {
            state = self.drained.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        if state.closed {
            drop(state);
            let _ = std::io::stderr().write_all(line);
            return;
        }
        if state.buf.is_empty() {
            self.filled.notify_one();
        }
        state.buf.extend_from_slice(line);
    }

    /// The writer thread: wait for a first line, let more gather, write them all; until closed.
    fn drain(&self, mut out: impl Write) {
        let mut taken = Vec::new();
        loop {
            let mut state = self.lock();
            while state.buf.is_empty() && !state.closed {
                state = self.filled.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if !state.closed {
                drop(state);
                std::thread::sleep(GATHER);
                state = self.lock();
            }
            std::mem::swap(&mut state.buf, &mut taken);
            let last = state.closed;
            drop(state);
            self.drained.notify_all();
            // A log that cannot be written (stderr closed) is not worth stopping for.
            let _ = out.write_all(&taken).and_then(|()| out.flush());
            taken.clear();
            if last {
                return;
            }
        }
    }
}

/// What `tracing` writes each formatted event to (one `write_all` per event).
#[derive(Clone)]
struct Gathering {
    shared: Arc<Shared>,
}

impl Write for Gathering {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.shared.append(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Gathering {
    type Writer = Gathering;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Keeps the writer thread. Dropping it writes out what is buffered and stops the thread; lines
/// logged afterwards go straight to stderr.
pub struct LogGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.filled.notify_one();
        self.shared.drained.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `out` the test can read back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Sink {
        fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
            self.0.lock().expect("sink lock")
        }
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bytes().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_from_every_thread_is_written_whole_and_in_each_threads_order() {
        let sink = Sink::default();
        let (writer, guard) = gathering(sink.clone());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let mut w = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        // Lines of mixed sizes, each of which must come out whole.
                        let pad = "x".repeat((i * 37) % 700);
                        w.write_all(format!("{t} {i} {pad}\n").as_bytes())
                            .expect("append");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("logging thread");
        }
        drop(guard);
        let out = String::from_utf8(sink.bytes().clone()).expect("UTF-8");
        let mut next = [0usize; 4];
        for line in out.lines() {
            let mut parts = line.split(' ');
            let mut number = || -> usize {
                let part = parts.next().expect("a number");
                part.parse().expect("a number")
            };
            let (t, i) = (number(), number());
            let pad = parts.next().expect("padding");
            assert_eq!(pad.len(), (i * 37) % 700, "line {line:?}");
            assert_eq!(i, next[t], "thread {t}'s lines out of order");
            next[t] += 1;
        }
        assert_eq!(next, [5_000; 4]);
    }

    #[test]
    fn a_logging_thread_waits_rather_than_drop_when_the_buffer_is_full() {
        // A writer slower than the loggers: 64 KiB lines into a 1 MiB bound.
        #[derive(Clone, Default)]
        struct Slow(Sink);
        impl Write for Slow {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_millis(5));
                self.0.write(buf)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let slow = Slow::default();
        let (mut writer, guard) = gathering(slow.clone());
        let line = vec![b'y'; 64 * 1024];
        for _ in 0..100 {
            writer.write_all(&line).expect("append");
            assert!(writer.shared.lock().buf.len() <= MAX_BUFFERED + line.len());
        }
        drop(guard);
        assert_eq!(slow.0.bytes().len(), 100 * line.len());
    }

    #[test]
    fn lines_after_the_guard_is_dropped_are_not_lost_in_the_buffer() {
        let sink = Sink::default();
        let (mut writer, guard) = gathering(sink.clone());
        writer.write_all(b"before\n").expect("append");
        drop(guard);
        assert_eq!(&sink.bytes()[..], b"before\n");
        // Goes to the process's stderr now; what matters is that it is not kept.
        writer.write_all(b"after\n").expect("append");
        assert!(writer.shared.lock().buf.is_empty());
    }
}

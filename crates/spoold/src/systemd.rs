//! systemd's notification protocol (`sd_notify`), spoken by hand: one datagram per state
//! change to the unix socket `NOTIFY_SOCKET` names (a path, or `@name` in the abstract
//! namespace). `READY=1` once the store is open and the API listens, `RELOADING=1` and
//! `READY=1` around a reload, `STOPPING=1` when a shutdown begins, and `WATCHDOG=1` at half the
//! interval `WATCHDOG_USEC` asks for (when `WATCHDOG_PID` is absent or names this process).
//! Without `NOTIFY_SOCKET` (not started by systemd with `Type=notify`) every call does nothing.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Where to tell systemd how the daemon is doing.
#[derive(Debug)]
pub struct Notifier {
    socket: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// The socket `NOTIFY_SOCKET` names, if any.
    pub fn from_env() -> Notifier {
        let socket = std::env::var_os("NOTIFY_SOCKET").and_then(|name| {
            let name = name.to_str()?.to_owned();
            let addr = match name.strip_prefix('@') {
                Some(abstract_name) => {
                    use std::os::linux::net::SocketAddrExt as _;
                    SocketAddr::from_abstract_name(abstract_name.as_bytes()).ok()?
                }
                None => SocketAddr::from_pathname(&name).ok()?,
            };
            Some((UnixDatagram::unbound().ok()?, addr))
        });
        Notifier { socket }
    }

    /// Send `state` (newline-separated `KEY=value` lines). Errors are ignored: systemd not
    /// listening must not stop the daemon.
    pub fn send(&self, state: &str) {
        if let Some((socket, addr)) = &self.socket {
            if let Err(e) = socket.send_to_addr(state.as_bytes(), addr) {
                tracing::warn!(error = %e, "cannot notify systemd");
            }
        }
    }

    /// A reload begins (systemd's `RELOADING=1` needs the monotonic clock's time with it).
    pub fn reloading(&self) {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
    }

    /// How often to send `WATCHDOG=1`: half the interval systemd asks for, if it asks this
    /// process.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.socket.as_ref()?;
        if let Some(pid) = std::env::var_os("WATCHDOG_PID") {
            if pid.to_str()?.parse::<u32>().ok()? != std::process::id() {
                return None;
            }
        }
        let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
        (usec > 0).then(|| Duration::from_micros(usec / 2))
    }
}

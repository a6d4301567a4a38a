//! Wake-ups across hosts: a dedicated connection LISTENs for `spoold_work` and `spoold_tasks`
//! and sends them when this host made work due. After a reconnect it LISTENs again and wakes
//! every waiter to rescan; a slow poll wakes them too. None of this is needed for correctness:
//! a lost notification only delays work until the next poll.
//!
//! Poll-only (`--db-notify off`, for PostgreSQL-wire databases without LISTEN/NOTIFY): no
//! connection, no LISTEN, no NOTIFY — only the poll wakes the waiters for other hosts' work.
//! Either way a write of this host wakes its own waiters at once, in process ([`Wakeups`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::connect::Target;

const WORK: &str = "spoold_work";
const TASKS: &str = "spoold_tasks";

/// The local waiters, and what this host has to announce to the others (nobody reads the
/// announcements when polling only).
#[derive(Clone, Default)]
pub(crate) struct Wakeups {
    deliveries: Arc<Notify>,
    tasks: Arc<Notify>,
    announce_work: Arc<AtomicBool>,
    announce_tasks: Arc<AtomicBool>,
    announce: Arc<Notify>,
}

impl Wakeups {
    pub(crate) fn deliveries(&self) -> Arc<Notify> {
        Arc::clone(&self.deliveries)
    }

    pub(crate) fn tasks(&self) -> Arc<Notify> {
        Arc::clone(&self.tasks)
    }

    /// After a commit that made deliveries due: wake the local scheduler, and tell the others.
    pub(crate) fn deliveries_when(&self, made_work_due: bool) {
        if made_work_due {
            self.deliveries.notify_one();
            self.announce_work.store(true, Ordering::Release);
            self.announce.notify_one();
        }
    }

    /// As [`Wakeups::deliveries_when`], for tasks.
    pub(crate) fn tasks_when(&self, made_work_due: bool) {
        if made_work_due {
            self.tasks.notify_one();
            self.announce_tasks.store(true, Ordering::Release);
            self.announce.notify_one();
        }
    }

    fn wake_all(&self) {
        self.deliveries.notify_one();
        self.tasks.notify_one();
    }
}

/// The listening (or only polling) task; stopped when dropped.
pub(crate) struct Listener {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// LISTEN on a connection of its own, relay this host's announcements as NOTIFY, and wake
    /// every waiter every `poll` as well.
    pub(crate) fn spawn(target: Target, wake: Wakeups, poll: Duration) -> Listener {
        Listener {
            task: tokio::spawn(run(target, wake, poll)),
        }
    }

    /// Wake every waiter every `poll`, and nothing else: no connection, no LISTEN, no NOTIFY.
    pub(crate) fn poll_only(wake: Wakeups, poll: Duration) -> Listener {
        Listener {
            task: tokio::spawn(poll_only(wake, poll)),
        }
    }
}

async fn poll_only(wake: Wakeups, poll: Duration) {
    let mut ticker = tokio::time::interval(poll);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // The first tick is at once: a rescan at start, as after a LISTEN.
        ticker.tick().await;
        wake.wake_all();
    }
}

async fn run(target: Target, wake: Wakeups, poll: Duration) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match session(&target, &wake, poll).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(e) => {
                tracing::warn!(error = %e, "PostgreSQL notification connection lost; reconnecting");
            }
        }
        // Whatever was announced meanwhile, the pollers below cover it; rescan now too.
        wake.wake_all();
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// One connection's life: LISTEN, then relay notifications both ways until it breaks.
async fn session(target: &Target, wake: &Wakeups, poll: Duration) -> Result<(), String> {
    let (tx, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    let (client, mut driver) = target
        .connect_dedicated(tx)
        .await
        .map_err(|e| e.to_string())?;
    client
        .batch_execute(&format!("LISTEN {WORK}; LISTEN {TASKS}"))
        .await
        .map_err(|e| e.to_string())?;
    // Anything announced while we were not listening is found by a rescan.
    wake.wake_all();
    let mut ticker = tokio::time::interval(poll);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            n = notifications.recv() => match n {
                Some(n) if n.channel() == WORK => wake.deliveries.notify_one(),
                Some(n) if n.channel() == TASKS => wake.tasks.notify_one(),
                Some(_) => {}
                None => return Err("notification stream ended".into()),
            },
            () = wake.announce.notified() => {
                // One NOTIFY per burst, outside the writers' transactions: a NOTIFY inside them
                // would serialise their commits on the server's notification queue lock.
                let mut sql = String::new();
                if wake.announce_work.swap(false, Ordering::AcqRel) {
                    sql.push_str(&format!("NOTIFY {WORK};"));
                }
                if wake.announce_tasks.swap(false, Ordering::AcqRel) {
                    sql.push_str(&format!("NOTIFY {TASKS};"));
                }
                if !sql.is_empty() {
                    client.batch_execute(&sql).await.map_err(|e| e.to_string())?;
                }
            }
            _ = ticker.tick() => wake.wake_all(),
            _ = &mut driver => return Err("connection closed".into()),
        }
    }
}

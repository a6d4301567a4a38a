//! The task contract: idempotent submission by (scope, key), the state machine as the store
//! enforces it, attempts, retries, deadlines, cancel, recovery and the transition log.

use spool_store::tasks::{
    ClaimType, ClaimedTask, Executor, NewTask, OrphanEnd, Orphaned, Renewed, StepRecord, Task,
    TaskAction, TaskAttemptEnd, TaskInsert, TaskStatus, WaitReason,
};
use spool_store::{Store, StoreError};
use tokio::task::JoinSet;

use super::id;

/// A task of type `backup` with parameters `params`, keyed `key` in scope `default`.
pub fn new_task(n: u32, key: Option<&str>, params: &str) -> NewTask {
    NewTask {
        id: id(n),
        task_type: "backup".into(),
        scope: "default".into(),
        idempotency_key: key.map(str::to_owned),
        params: params.to_owned(),
        digest: params.as_bytes().to_vec(),
        max_attempts: 3,
        not_before: None,
        queue_timeout_ms: None,
        retry_deadline_ms: None,
        locks: Vec::new(),
    }
}

async fn submit(store: &Store, new: NewTask) -> Task {
    match store.insert_task(new).await.expect("insert task") {
        TaskInsert::Created(t) => t,
        other => panic!("expected a new task, got {other:?}"),
    }
}

async fn claim_one(store: &Store) -> ClaimedTask {
    claim_type(store, "backup").await
}

async fn claim_type(store: &Store, task_type: &str) -> ClaimedTask {
    let mut claimed = store
        .claim_tasks(1, vec![task_type.into()], 60_000, "host:1".into())
        .await
        .expect("claim tasks");
    assert_eq!(claimed.tasks.len(), 1, "one task due");
    claimed.tasks.remove(0)
}

fn end(claimed: &ClaimedTask, outcome: TaskStatus, retry_at: Option<i64>) -> TaskAttemptEnd {
    TaskAttemptEnd {
        id: claimed.id.clone(),
        claim_seq: claimed.claim_seq,
        outcome,
        exit_code: (outcome == TaskStatus::Failed).then_some(75),
        signal: None,
        error_code: (outcome == TaskStatus::Failed).then(|| "transient".to_owned()),
        error: None,
        duration_ms: 5,
        output_bytes: 10,
        output_truncated: false,
        killed: false,
        result_summary: (outcome == TaskStatus::Succeeded).then(|| "3 files".to_owned()),
        retry_at,
        hold_locks: false,
        review_partial: true,
        redactions: 0,
        never_ran: false,
    }
}

async fn task(store: &Store, n: u32) -> Task {
    store
        .get_task(id(n))
        .await
        .expect("get task")
        .expect("task exists")
}

async fn log_of(store: &Store, n: u32) -> Vec<(Option<TaskStatus>, TaskStatus, String)> {
    store
        .task_transitions(id(n))
        .await
        .expect("transitions")
        .expect("task exists")
        .into_iter()
        .map(|t| (t.from, t.to, t.reason))
        .collect()
}

pub async fn task_submission_is_idempotent_by_scope_and_key(store: Store) {
    let first = submit(
        &store,
        new_task(1, Some("backup:db1:2026-12-01"), r#"{"db":"db1"}"#),
    )
    .await;
    assert_eq!((first.status, first.attempts), (TaskStatus::Pending, 0));
    match store
        .insert_task(new_task(
            2,
            Some("backup:db1:2026-12-01"),
            r#"{"db":"db1"}"#,
        ))
        .await
        .expect("insert")
    {
        TaskInsert::Existing(t) => assert_eq!(t.id, id(1)),
        other => panic!("expected the existing task, got {other:?}"),
    }
    match store
        .insert_task(new_task(
            3,
            Some("backup:db1:2026-12-01"),
            r#"{"db":"db2"}"#,
        ))
        .await
        .expect("insert")
    {
        TaskInsert::Conflict { existing_id } => assert_eq!(existing_id, id(1)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Another scope is another key space; no key, no deduplication.
    let mut other_scope = new_task(4, Some("backup:db1:2026-12-01"), r#"{"db":"db1"}"#);
    other_scope.scope = "staging".into();
    submit(&store, other_scope).await;
    submit(&store, new_task(5, None, "{}")).await;
    submit(&store, new_task(6, None, "{}")).await;
    let page = store
        .list_tasks(Default::default(), 100, None)
        .await
        .expect("list");
    assert_eq!(page.tasks.len(), 4);
    // By creation time: none before the first, all before tomorrow, none since tomorrow.
    let created = page.tasks[0].created_at;
    let count = |filter: spool_store::tasks::TaskFilter| {
        let store = store.clone();
        async move {
            store
                .list_tasks(filter, 100, None)
                .await
                .expect("list")
                .tasks
                .len()
        }
    };
    let day = 86_400_000;
    let before = |at| spool_store::tasks::TaskFilter {
        created_before: Some(at),
        ..Default::default()
    };
    let after = |at| spool_store::tasks::TaskFilter {
        created_after: Some(at),
        ..Default::default()
    };
    assert_eq!(count(before(created)).await, 0);
    assert_eq!(count(before(created + day)).await, 4);
    assert_eq!(count(after(created)).await, 4);
    assert_eq!(count(after(created + day)).await, 0);
}

pub async fn concurrent_task_submissions_create_one(store: Store) {
    let mut racers = JoinSet::new();
    for n in 1..=32 {
        let store = store.clone();
        racers.spawn(async move {
            store
                .insert_task(new_task(n, Some("deploy:prod"), r#"{"env":"prod"}"#))
                .await
                .expect("insert")
        });
    }
    let mut created = 0;
    while let Some(outcome) = racers.join_next().await {
        match outcome.expect("racer") {
            TaskInsert::Created(_) => created += 1,
            TaskInsert::Existing(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(created, 1);
    let claimed = store
        .claim_tasks(64, vec!["backup".into()], 60_000, "h:1".into())
        .await
        .expect("claim");
    assert_eq!(claimed.tasks.len(), 1, "one task, one execution");
}

pub async fn task_attempts_retry_then_succeed(store: Store) {
    submit(&store, new_task(1, None, "{}")).await;
    // Only declared types are claimed.
    assert!(store
        .claim_tasks(5, vec!["cleanup".into()], 60_000, "h:1".into())
        .await
        .expect("claim")
        .tasks
        .is_empty());
    let first = claim_one(&store).await;
    assert_eq!((first.attempt, first.max_attempts), (1, 3));
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.executor_id.as_deref()),
        (TaskStatus::Running, Some("host:1"))
    );
    assert!(t.lease_until.is_some() && t.started_at.is_some());
    let now = store.now_ms();
    assert_eq!(
        store
            .finish_task(end(&first, TaskStatus::Failed, Some(now)))
            .await
            .expect("finish"),
        Some(TaskStatus::Pending)
    );
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.exit_code, t.next_run_at),
        (TaskStatus::Pending, Some(75), Some(now))
    );
    let second = claim_one(&store).await;
    assert_eq!(second.attempt, 2);
    // A late result of the first attempt changes nothing: not the task, not the attempt that
    // runs now.
    assert_eq!(
        store
            .finish_task(end(&first, TaskStatus::TimedOut, None))
            .await
            .expect("finish"),
        None
    );
    assert_eq!(
        store
            .finish_task(end(&second, TaskStatus::Succeeded, None))
            .await
            .expect("finish"),
        Some(TaskStatus::Succeeded)
    );
    let t = task(&store, 1).await;
    assert_eq!(t.status, TaskStatus::Succeeded);
    assert_eq!(t.result_summary.as_deref(), Some("3 files"));
    assert!(t.finished_at.is_some());
    let attempts = store
        .task_attempts(id(1))
        .await
        .expect("attempts")
        .expect("known");
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].outcome.as_deref(), Some("failed"));
    assert_eq!(attempts[0].exit_code, Some(75));
    assert_eq!(attempts[1].outcome.as_deref(), Some("succeeded"));
    assert_eq!(attempts[1].executor_id, "host:1");
    use TaskStatus::*;
    assert_eq!(
        log_of(&store, 1).await,
        [
            (None, Pending, "submitted".to_owned()),
            (Some(Pending), Running, "started".to_owned()),
            (Some(Running), Failed, "transient".to_owned()),
            (Some(Failed), Pending, "retry".to_owned()),
            (Some(Pending), Running, "started".to_owned()),
            (Some(Running), Succeeded, "succeeded".to_owned()),
        ]
    );
    // A success is never re-run.
    assert_eq!(
        store.retry_task(id(1), 3).await.expect("retry"),
        TaskAction::Invalid(Succeeded)
    );
}

/// An attempt its host never started (its lease was over before it could: `lease_lost`) is
/// recorded `interrupted` and given back, pending at once, if its claim is still current, and
/// not counted (the task's budget grows by one); a host that took the task over meanwhile keeps
/// it.
pub async fn an_unstarted_attempt_is_given_back(store: Store) {
    submit(&store, new_task(1, None, "{}")).await;
    let first = claim_one(&store).await;
    let unstarted = |claimed: &ClaimedTask, at| TaskAttemptEnd {
        error_code: Some("lease_lost".into()),
        error: Some("not started".into()),
        exit_code: None,
        output_bytes: 0,
        never_ran: true,
        ..end(claimed, TaskStatus::Interrupted, Some(at))
    };
    let budget = task(&store, 1).await.max_attempts;
    let now = store.now_ms();
    assert_eq!(
        store
            .finish_task(unstarted(&first, now))
            .await
            .expect("finish"),
        Some(TaskStatus::Pending)
    );
    let t = task(&store, 1).await;
    assert_eq!((t.status, t.next_run_at), (TaskStatus::Pending, Some(now)));
    assert_eq!(
        t.max_attempts,
        budget + 1,
        "the attempt that never ran is not counted"
    );
    use TaskStatus::*;
    assert_eq!(
        log_of(&store, 1).await[2..],
        [
            (Some(Running), Interrupted, "lease_lost".to_owned()),
            (Some(Interrupted), Pending, "retry".to_owned()),
        ]
    );
    // Taken over by another host before the late report: the report changes nothing, and the
    // task stays with the host that took it over.
    let second = store
        .claim_tasks(1, vec!["backup".into()], 1, "host:1".into())
        .await
        .expect("claim")
        .tasks
        .remove(0);
    assert_eq!(second.attempt, 2);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let taken = store
        .expire_task_leases("host:2".into(), 60_000)
        .await
        .expect("expire");
    assert_eq!(taken.len(), 1);
    assert_eq!(
        store
            .finish_task(unstarted(&second, store.now_ms()))
            .await
            .expect("finish"),
        None
    );
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.executor_id.as_deref()),
        (Running, Some("host:2"))
    );
}

pub async fn task_deadlines_end_waiting_tasks(store: Store) {
    let mut queued = new_task(1, None, "{}");
    queued.queue_timeout_ms = Some(0);
    submit(&store, queued).await;
    let mut retried = new_task(2, None, "{}");
    retried.retry_deadline_ms = Some(200);
    submit(&store, retried).await;
    // The claim ends the queued one first, and starts the other.
    let claimed = claim_one(&store).await;
    assert_eq!(claimed.id, id(2));
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.error_code.as_deref()),
        (TaskStatus::TimedOut, Some("queue_timeout"))
    );
    let retry_at = claimed.created_at + 10_000;
    store
        .finish_task(end(&claimed, TaskStatus::Failed, Some(retry_at)))
        .await
        .expect("finish");
    super::wait_until(&store, claimed.created_at + 250).await;
    assert_eq!(store.expire_tasks(10).await.expect("expire"), 1);
    let t = task(&store, 2).await;
    assert_eq!(
        (t.status, t.error_code.as_deref()),
        (TaskStatus::TimedOut, Some("retry_deadline"))
    );
    assert_eq!(
        store
            .next_task_due(vec!["backup".into()])
            .await
            .expect("next"),
        None
    );
}

pub async fn task_cancel_pending_and_running(store: Store) {
    submit(&store, new_task(1, None, "{}")).await;
    assert!(matches!(
        store.cancel_task(id(1)).await.expect("cancel"),
        TaskAction::Done(ref t) if t.status == TaskStatus::Canceled
    ));
    submit(&store, new_task(2, None, "{}")).await;
    let claimed = claim_one(&store).await;
    assert!(matches!(
        store.cancel_task(id(2)).await.expect("cancel"),
        TaskAction::CancelRequested(ref t) if t.cancel_requested && t.status == TaskStatus::Running
    ));
    store
        .finish_task(end(&claimed, TaskStatus::Canceled, None))
        .await
        .expect("finish");
    assert_eq!(task(&store, 2).await.status, TaskStatus::Canceled);
    assert_eq!(
        store.cancel_task(id(2)).await.expect("cancel"),
        TaskAction::Invalid(TaskStatus::Canceled)
    );
    assert_eq!(
        store.cancel_task(id(9)).await.expect("cancel"),
        TaskAction::NotFound
    );
}

pub async fn recover_takes_running_tasks_over_until_settled(store: Store) {
    submit(&store, new_task(1, None, "{}")).await;
    submit(&store, new_task(2, None, "{}")).await;
    let claimed = claim_one(&store).await;
    let me = Executor {
        id: "host:2:new".into(),
        host: "here".into(),
    };
    let orphans = store
        .recover_tasks(me.clone(), 30_000)
        .await
        .expect("recover");
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    let o = &orphans[0];
    assert_eq!(
        (
            o.id.as_str(),
            o.task_type.as_str(),
            o.attempt,
            o.code.as_str()
        ),
        (id(1).as_str(), "backup", 1, "daemon_restart")
    );
    assert_eq!(o.kill_grace_ms, spool_store::tasks::DEFAULT_KILL_GRACE_MS);
    assert!(o.claim_seq > claimed.claim_seq, "a new claim: {o:?}");
    // Still running, now under the new executor, until its processes are gone.
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.ending.as_deref(), t.executor_id.as_deref()),
        (
            TaskStatus::Running,
            Some("daemon_restart"),
            Some("host:2:new")
        )
    );
    // The old executor's end is fenced off.
    assert_eq!(
        store
            .finish_task(end(&claimed, TaskStatus::Succeeded, None))
            .await
            .expect("late finish"),
        None
    );
    // A settle under another claim does nothing.
    let settle = |claim_seq| OrphanEnd {
        id: id(1),
        claim_seq,
        then: TaskStatus::ManualReview,
        never_ran: false,
        output_bytes: 0,
        output_dropped: 0,
    };
    assert_eq!(
        store
            .settle_orphan(settle(claimed.claim_seq))
            .await
            .expect("stale settle"),
        None
    );
    assert_eq!(
        store
            .settle_orphan(settle(o.claim_seq))
            .await
            .expect("settle"),
        Some(TaskStatus::ManualReview)
    );
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.error_code.as_deref(), t.ending),
        (TaskStatus::ManualReview, Some("daemon_restart"), None)
    );
    let attempts = store
        .task_attempts(id(1))
        .await
        .expect("attempts")
        .expect("known");
    assert_eq!(attempts[0].outcome.as_deref(), Some("interrupted"));
    assert_eq!(
        attempts[0].executor_id, "host:1",
        "the attempt keeps who ran it"
    );
    assert_eq!(
        log_of(&store, 1).await,
        [
            (None, TaskStatus::Pending, "submitted".into()),
            (
                Some(TaskStatus::Pending),
                TaskStatus::Running,
                "started".into()
            ),
            (
                Some(TaskStatus::Running),
                TaskStatus::Interrupted,
                "daemon_restart".into()
            ),
            (
                Some(TaskStatus::Interrupted),
                TaskStatus::ManualReview,
                "on_interrupt".into()
            ),
        ]
    );
    assert_eq!(task(&store, 2).await.status, TaskStatus::Pending);
    // Settled once only.
    assert_eq!(
        store
            .settle_orphan(settle(o.claim_seq))
            .await
            .expect("settle again"),
        None
    );
}

/// A restarted daemon takes over at once the running tasks of an earlier run on its host that
/// it knows is gone, whatever their leases; it never touches another host's.
pub async fn dead_executors_are_taken_over_at_once(store: Store) {
    submit(&store, new_task(1, None, "{}")).await;
    submit(&store, new_task(2, None, "{}")).await;
    let here = |id: &str| Executor {
        id: id.into(),
        host: "machine/boot/ns".into(),
    };
    let old = here("web:7:aaaa");
    let other = Executor {
        id: "db:9:bbbb".into(),
        host: "elsewhere".into(),
    };
    for executor in [old.clone(), other.clone()] {
        store
            .claim_tasks(1, vec!["backup".into()], 60_000, executor)
            .await
            .expect("claim");
    }
    let me = here("web:8:cccc");
    assert_eq!(
        store
            .task_executors_on(me.host.clone(), me.id.clone())
            .await
            .expect("executors"),
        std::slice::from_ref(&old.id)
    );
    let taken = store
        .take_over_tasks_from(vec![old.id.clone()], me.clone(), 60_000)
        .await
        .expect("take over");
    assert_eq!(taken.len(), 1);
    assert_eq!(
        (
            taken[0].id.as_str(),
            taken[0].code.as_str(),
            taken[0].host.as_str()
        ),
        (id(1).as_str(), "daemon_restart", "machine/boot/ns")
    );
    assert_eq!(
        task(&store, 1).await.executor_id.as_deref(),
        Some("web:8:cccc")
    );
    assert_eq!(
        task(&store, 2).await.executor_id.as_deref(),
        Some("db:9:bbbb")
    );
    assert!(store
        .task_executors_on(me.host.clone(), me.id.clone())
        .await
        .expect("executors")
        .is_empty());
}

/// While an orphaned attempt is being ended, its task keeps its locks and its quota slot; once
/// settled they are free. A cancel requested meanwhile makes it `canceled`.
pub async fn orphans_hold_locks_and_quota_until_settled(store: Store) {
    submit(&store, locked(1, &["env:prod"])).await;
    submit(&store, locked(2, &["env:prod"])).await;
    submit(&store, new_task(3, None, "{}")).await;
    let quota = ClaimType {
        name: "backup".into(),
        concurrency: Some(2),
        kill_grace_ms: 3_000,
    };
    let (ids, _) = claim_ids(&store, 1, vec![quota.clone()]).await;
    assert_eq!(ids, [id(1)]);
    let orphans = store
        .recover_tasks("host:new".into(), 30_000)
        .await
        .expect("recover");
    assert_eq!(orphans.len(), 1);
    assert_eq!(
        orphans[0].kill_grace_ms, 3_000,
        "the grace its executor gave it"
    );
    let lock = store.held_task_locks(100).await.expect("locks");
    assert_eq!(lock.len(), 1);
    assert_eq!(
        (
            lock[0].task_id.as_str(),
            lock[0].attempt,
            lock[0].ending.as_deref()
        ),
        (id(1).as_str(), 1, Some("daemon_restart"))
    );
    assert_eq!(lock[0].waiting, [id(2)]);
    // 2 waits for the lock; 3 takes the quota's other slot; nothing else may start.
    let (ids, waiting) = claim_ids(&store, 10, vec![quota.clone()]).await;
    assert_eq!((ids, waiting), (vec![id(3)], 1));
    let (ids, _) = claim_ids(&store, 10, vec![quota.clone()]).await;
    assert!(ids.is_empty(), "the orphan still counts against the quota");
    assert!(matches!(
        store.cancel_task(id(1)).await.expect("cancel"),
        TaskAction::CancelRequested(_)
    ));
    assert_eq!(
        store
            .settle_orphan(OrphanEnd {
                id: id(1),
                claim_seq: orphans[0].claim_seq,
                then: TaskStatus::Pending,
                never_ran: false,
                output_bytes: 12,
                output_dropped: 30,
            })
            .await
            .expect("settle"),
        Some(TaskStatus::Canceled),
        "the operator's cancel wins over on_interrupt"
    );
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.error_code.as_deref(), t.finished_at.is_some()),
        (TaskStatus::Canceled, Some("canceled"), true)
    );
    // What reached the log and what was dropped after the daemon was gone, in the record.
    let attempts = store
        .task_attempts(id(1))
        .await
        .expect("attempts")
        .expect("task");
    let a = attempts.last().expect("an attempt");
    assert_eq!(
        (a.output_bytes, a.output_truncated),
        (Some(42), Some(true)),
        "{a:?}"
    );
    assert!(
        a.error
            .as_deref()
            .is_some_and(|e| e.contains("30 bytes of output")),
        "{a:?}"
    );
    let (ids, _) = claim_ids(&store, 10, vec![quota]).await;
    assert_eq!(ids, [id(2)], "the lock and the slot are free");
}

/// A cancel requested before the attempt's end is recorded wins over a failure that would
/// be retried, and over a timeout; a success stays a success.
pub async fn a_requested_cancel_wins_over_the_outcome(store: Store) {
    for (n, outcome) in [
        (1, TaskStatus::Failed),
        (2, TaskStatus::TimedOut),
        (3, TaskStatus::Succeeded),
    ] {
        submit(&store, new_task(n, None, "{}")).await;
        let claimed = claim_one(&store).await;
        assert!(matches!(
            store.cancel_task(id(n)).await.expect("cancel"),
            TaskAction::CancelRequested(_)
        ));
        // A failure or a timeout that would be retried at once.
        let retry_at = (outcome != TaskStatus::Succeeded).then(|| store.now_ms());
        let status = store
            .finish_task(end(&claimed, outcome, retry_at))
            .await
            .expect("finish");
        let want = if outcome == TaskStatus::Succeeded {
            TaskStatus::Succeeded
        } else {
            TaskStatus::Canceled
        };
        assert_eq!(status, Some(want), "{outcome}");
        let t = task(&store, n).await;
        assert_eq!((t.status, t.next_run_at), (want, None), "{t:?}");
        let attempts = store
            .task_attempts(id(n))
            .await
            .expect("attempts")
            .expect("known");
        assert_eq!(
            attempts[0].outcome.as_deref(),
            Some(outcome.as_str()),
            "the attempt keeps how it really ended"
        );
    }
    let (ids, _) = claim_ids(&store, 10, vec!["backup".into()]).await;
    assert!(ids.is_empty(), "no further attempt: {ids:?}");
}

/// Pending tasks of a type no longer declared go to review and give up their locks.
pub async fn undeclared_types_go_to_review(store: Store) {
    submit(&store, locked(1, &["env:prod"])).await;
    submit(
        &store,
        NewTask {
            task_type: "kept".into(),
            ..new_task(2, None, "{}")
        },
    )
    .await;
    // 1 fails and keeps its lock through the backoff.
    let claimed = claim_one(&store).await;
    store
        .finish_task(TaskAttemptEnd {
            hold_locks: true,
            ..end(&claimed, TaskStatus::Failed, Some(store.now_ms() + 60_000))
        })
        .await
        .expect("finish");
    assert_eq!(store.held_task_locks(10).await.expect("locks").len(), 1);
    let reviewed = store
        .review_undeclared_tasks(vec!["kept".into()])
        .await
        .expect("review");
    assert_eq!(reviewed, [id(1)]);
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.error_code.as_deref()),
        (TaskStatus::ManualReview, Some("type_undeclared"))
    );
    assert!(store.held_task_locks(10).await.expect("locks").is_empty());
    assert_eq!(task(&store, 2).await.status, TaskStatus::Pending);
}

/// Bring a fresh task `n` to `status` through the store's own operations.
async fn reach(store: &Store, n: u32, status: TaskStatus) {
    use TaskStatus::*;
    // A type of its own, so that its claim cannot take another test task.
    let task_type = format!("t{n}");
    submit(
        store,
        NewTask {
            task_type: task_type.clone(),
            ..new_task(n, None, "{}")
        },
    )
    .await;
    if status == Pending {
        return;
    }
    if status == Canceled {
        store.cancel_task(id(n)).await.expect("cancel");
        return;
    }
    let claimed = claim_type(store, &task_type).await;
    match status {
        Running => {}
        ManualReview => {
            store
                .finish_task(end(&claimed, Failed, None))
                .await
                .expect("finish");
            store
                .decide_task(id(n), ManualReview, "partial".into(), None)
                .await
                .expect("decide");
        }
        outcome => {
            store
                .finish_task(end(&claimed, outcome, None))
                .await
                .expect("finish");
        }
    }
    assert_eq!(task(store, n).await.status, status);
}

/// Every pair of statuses: the store allows exactly the table's edges, and a refused change
/// leaves the task and its log as they were.
pub async fn every_task_transition_is_checked(store: Store) {
    let mut n = 0;
    for from in TaskStatus::ALL {
        for to in TaskStatus::ALL {
            n += 1;
            reach(&store, n, from).await;
            let log_before = log_of(&store, n).await;
            let action = store
                .decide_task(id(n), to, "test".into(), None)
                .await
                .expect("decide");
            // Running is entered only by a claim, never by a decision.
            let allowed = from.can_become(to) && to != TaskStatus::Running;
            match action {
                TaskAction::Done(t) => {
                    assert!(allowed, "{from} → {to} was allowed");
                    assert_eq!(t.status, to);
                    assert_eq!(log_of(&store, n).await.len(), log_before.len() + 1);
                }
                TaskAction::Invalid(status) => {
                    assert!(!allowed, "{from} → {to} was refused");
                    assert_eq!(status, from);
                    assert_eq!(log_of(&store, n).await, log_before);
                }
                other => panic!("{from} → {to}: {other:?}"),
            }
            // Finish only from running, and only to an outcome: a bug is refused, not written.
            if from == TaskStatus::Running && to == TaskStatus::Running {
                let task = task(&store, n).await;
                let bad = TaskAttemptEnd {
                    outcome: TaskStatus::Pending,
                    ..end(
                        &ClaimedTask {
                            id: task.id.clone(),
                            task_type: task.task_type.clone(),
                            params: task.params.clone(),
                            claim_seq: 1,
                            attempt: 1,
                            max_attempts: 3,
                            created_at: task.created_at,
                            started_at: task.created_at,
                            retry_deadline: None,
                            idempotency_key: None,
                        },
                        TaskStatus::Pending,
                        None,
                    )
                };
                let err = store.finish_task(bad).await.expect_err("illegal");
                assert!(matches!(err, StoreError::IllegalTransition { .. }), "{err}");
                assert_eq!(super::task_status(&store, n).await, TaskStatus::Running);
            }
        }
    }
}

pub async fn finish_and_claim_hands_the_slot_on(store: Store) {
    submit(&store, new_task(1, None, "{}")).await;
    submit(&store, new_task(2, None, "{}")).await;
    let first = claim_one(&store).await;
    let (status, next) = store
        .finish_and_claim(
            end(&first, TaskStatus::Succeeded, None),
            vec!["backup".into()],
            60_000,
            "host:1".into(),
        )
        .await
        .expect("finish and claim");
    assert_eq!(status, Some(TaskStatus::Succeeded));
    let next = next.expect("the next due task, in the same commit");
    assert_eq!((next.id.as_str(), next.attempt), (id(2).as_str(), 1));
    assert_eq!(task(&store, 2).await.status, TaskStatus::Running);
    // Nothing due, or no types (the daemon is stopping): no claim.
    let (_, none) = store
        .finish_and_claim(
            end(&next, TaskStatus::Succeeded, None),
            Vec::new(),
            60_000,
            "host:1".into(),
        )
        .await
        .expect("finish");
    assert_eq!(none, None);
}

/// A script's result file and error are recorded whatever they hold, and both backends give
/// back the same text: PostgreSQL's `text` cannot hold a NUL, so the store keeps one as U+FFFD.
/// Before that, `printf 'a\0b' > "$SPOOLD_RESULT_FILE"` failed the attempt's record on
/// PostgreSQL: the task stayed `running` with its lock, and the next task never started.
pub async fn task_results_are_kept_whatever_they_hold(store: Store) {
    let given = || Some("a\0b".to_owned());
    let kept = Some("a\u{FFFD}b");
    submit(&store, locked(1, &["db:1"])).await;
    submit(&store, locked(2, &["db:1"])).await;
    let first = claim_one(&store).await;
    let (status, next) = store
        .finish_and_claim(
            TaskAttemptEnd {
                error: given(),
                result_summary: given(),
                ..end(&first, TaskStatus::Succeeded, None)
            },
            vec!["backup".into()],
            60_000,
            "host:1".into(),
        )
        .await
        .expect("an attempt is recorded whatever its text");
    assert_eq!(status, Some(TaskStatus::Succeeded));
    let next = next.expect("the lock is free: the next task starts in the same commit");
    assert_eq!(next.id, id(2));
    let t = task(&store, 1).await;
    assert_eq!(
        (t.error.as_deref(), t.result_summary.as_deref()),
        (kept, kept)
    );
    let attempts = store
        .task_attempts(id(1))
        .await
        .expect("attempts")
        .expect("known");
    assert_eq!(attempts[0].error.as_deref(), kept);

    // The same through `finish_task`, for a failure whose error holds one; then a person's
    // note.
    assert_eq!(
        store
            .finish_task(TaskAttemptEnd {
                error: given(),
                result_summary: given(),
                ..end(&next, TaskStatus::Failed, None)
            })
            .await
            .expect("an attempt is recorded whatever its text"),
        Some(TaskStatus::Failed)
    );
    let t = task(&store, 2).await;
    assert_eq!(
        (t.error.as_deref(), t.result_summary.as_deref()),
        (kept, kept)
    );
    let decided = store
        .decide_task(id(2), TaskStatus::ManualReview, "partial".into(), given())
        .await
        .expect("a decision is recorded whatever its note");
    assert!(matches!(decided, TaskAction::Done(_)), "{decided:?}");
    let log = store
        .task_transitions(id(2))
        .await
        .expect("log")
        .expect("known");
    assert_eq!(log.last().and_then(|t| t.note.as_deref()), kept);
}

fn locked(n: u32, locks: &[&str]) -> NewTask {
    NewTask {
        locks: locks.iter().map(|l| (*l).to_owned()).collect(),
        ..new_task(n, None, "{}")
    }
}

async fn claim_ids(store: &Store, limit: u32, types: Vec<ClaimType>) -> (Vec<String>, usize) {
    let claimed = store
        .claim_tasks(limit, types, 60_000, "host:1".into())
        .await
        .expect("claim");
    (
        claimed.tasks.into_iter().map(|t| t.id).collect(),
        claimed.waiting.len(),
    )
}

pub async fn task_locks_are_all_or_nothing_and_in_order(store: Store) {
    submit(&store, locked(1, &["env:prod"])).await;
    submit(&store, locked(2, &["env:prod", "host:a"])).await;
    submit(&store, locked(3, &["host:a"])).await;
    submit(&store, locked(4, &["env:dev"])).await;
    // 1 takes env:prod; 2 waits for it and so reserves host:a, which 3 must not take ahead of
    // it; 4 needs nothing held.
    let (ids, waiting) = claim_ids(&store, 10, vec!["backup".into()]).await;
    assert_eq!(ids, [id(1), id(4)]);
    assert_eq!(waiting, 2);
    let locks = store.held_task_locks(100).await.expect("locks");
    let prod = locks
        .iter()
        .find(|l| l.name == "env:prod")
        .expect("env:prod held");
    assert_eq!(
        (prod.task_id.as_str(), prod.task_status),
        (id(1).as_str(), TaskStatus::Running)
    );
    assert_eq!(prod.waiting, [id(2)]);
    assert_eq!(task(&store, 2).await.locks, ["env:prod", "host:a"]);
    // 1 ends: 2 gets both of its locks, 3 still waits for host:a.
    let first = store.get_task(id(1)).await.expect("get").expect("exists");
    let claim = ClaimedTask {
        id: first.id.clone(),
        task_type: first.task_type.clone(),
        params: first.params.clone(),
        claim_seq: 1,
        attempt: 1,
        max_attempts: 3,
        created_at: first.created_at,
        started_at: first.created_at,
        retry_deadline: None,
        idempotency_key: None,
    };
    store
        .finish_task(end(&claim, TaskStatus::Succeeded, None))
        .await
        .expect("finish");
    let (ids, _) = claim_ids(&store, 10, vec!["backup".into()]).await;
    assert_eq!(ids, [id(2)]);
    let names: Vec<String> = store
        .held_task_locks(100)
        .await
        .expect("locks")
        .into_iter()
        .filter(|l| l.task_id == id(2))
        .map(|l| l.name)
        .collect();
    assert_eq!(names, ["env:prod", "host:a"]);
}

pub async fn task_quota_limits_running_per_type(store: Store) {
    for n in 1..=5 {
        submit(&store, new_task(n, None, "{}")).await;
    }
    let quota = ClaimType {
        name: "backup".into(),
        concurrency: Some(2),
        kill_grace_ms: 1_000,
    };
    let (ids, waiting) = claim_ids(&store, 10, vec![quota.clone()]).await;
    assert_eq!(ids, [id(1), id(2)]);
    assert_eq!(waiting, 3, "every due task passed over is counted");
    let (ids, _) = claim_ids(&store, 10, vec![quota.clone()]).await;
    assert!(ids.is_empty(), "two are running: {ids:?}");
    let claimed = store
        .claim_tasks(10, vec![quota.clone()], 60_000, "h".into())
        .await
        .expect("claim");
    assert!(claimed
        .waiting
        .iter()
        .all(|(t, why)| t == "backup" && *why == WaitReason::Quota));
}

pub async fn task_locks_kept_through_backoff_only_when_asked(store: Store) {
    submit(&store, locked(1, &["env:prod"])).await;
    submit(&store, locked(2, &["env:prod"])).await;
    let first = claim_one(&store).await;
    let later = store.now_ms() + 60_000;
    let mut failed = end(&first, TaskStatus::Failed, Some(later));
    failed.hold_locks = true;
    assert_eq!(
        store.finish_task(failed).await.expect("finish"),
        Some(TaskStatus::Pending)
    );
    let (ids, waiting) = claim_ids(&store, 10, vec!["backup".into()]).await;
    assert!(
        ids.is_empty(),
        "1 keeps env:prod through its backoff: {ids:?}"
    );
    assert_eq!(waiting, 1);
    let held = store.held_task_locks(10).await.expect("locks");
    assert_eq!(
        (held[0].task_id.as_str(), held[0].task_status),
        (id(1).as_str(), TaskStatus::Pending)
    );
    // Canceled while it waits: the lock goes, 2 runs.
    store.cancel_task(id(1)).await.expect("cancel");
    let (ids, _) = claim_ids(&store, 10, vec!["backup".into()]).await;
    assert_eq!(ids, [id(2)]);
    // Without hold_locks a retry lets the lock go.
    let second = store.get_task(id(2)).await.expect("get").expect("exists");
    let claim = ClaimedTask {
        id: second.id,
        task_type: second.task_type,
        params: second.params,
        claim_seq: 1,
        attempt: 1,
        max_attempts: 3,
        created_at: second.created_at,
        started_at: second.created_at,
        retry_deadline: None,
        idempotency_key: None,
    };
    store
        .finish_task(end(&claim, TaskStatus::Failed, Some(later)))
        .await
        .expect("finish");
    assert!(store.held_task_locks(10).await.expect("locks").is_empty());
}

pub async fn task_steps_are_fenced_and_partial_failures_reviewed(store: Store) {
    submit(&store, new_task(1, None, "{}")).await;
    let first = claim_one(&store).await;
    let step = |attempt, name: &str| store.record_task_step(id(1), attempt, name.to_owned());
    assert!(matches!(
        step(1, "create-bucket").await.expect("step"),
        StepRecord::Recorded(_)
    ));
    assert!(matches!(
        step(1, "create-bucket").await.expect("again"),
        StepRecord::AlreadyDone(ref s) if s.attempt == 1
    ));
    assert!(matches!(
        step(2, "upload").await.expect("wrong attempt"),
        StepRecord::NotCurrent {
            status: TaskStatus::Running,
            attempt: 1
        }
    ));
    assert_eq!(
        store
            .record_task_step(id(9), 1, "x".into())
            .await
            .expect("unknown"),
        StepRecord::NotFound
    );
    assert_eq!(task(&store, 1).await.completed_steps, ["create-bucket"]);
    // It fails after a step: review, not a retry.
    let later = store.now_ms() + 1000;
    assert_eq!(
        store
            .finish_task(end(&first, TaskStatus::Failed, Some(later)))
            .await
            .expect("finish"),
        Some(TaskStatus::ManualReview)
    );
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.error_code.as_deref()),
        (TaskStatus::ManualReview, Some("partial_failure"))
    );
    assert!(matches!(
        step(1, "upload").await.expect("after the end"),
        StepRecord::NotCurrent {
            status: TaskStatus::ManualReview,
            ..
        }
    ));
    // An operator retries: the next attempt sees the step done and records the rest.
    store.retry_task(id(1), 1).await.expect("retry");
    let second = claim_one(&store).await;
    assert!(matches!(
        step(second.attempt, "create-bucket").await.expect("done before"),
        StepRecord::AlreadyDone(ref s) if s.attempt == 1
    ));
    assert!(matches!(
        step(second.attempt, "upload").await.expect("step"),
        StepRecord::Recorded(_)
    ));
    let steps = store
        .task_steps(id(1))
        .await
        .expect("steps")
        .expect("known");
    let names: Vec<(&str, u32)> = steps.iter().map(|s| (s.name.as_str(), s.attempt)).collect();
    assert_eq!(names, [("create-bucket", 1), ("upload", 2)]);
    assert_eq!(store.task_steps(id(9)).await.expect("steps"), None);
}

pub async fn task_leases_renew_and_expire_only_for_others(store: Store) {
    submit(&store, new_task(1, None, "{}")).await;
    let dead = Executor {
        id: "host:dead".into(),
        host: "boot/ns".into(),
    };
    let claimed = store
        .claim_tasks(1, vec!["backup".into()], 1, dead.clone())
        .await
        .expect("claim")
        .tasks
        .remove(0);
    let lease_until = task(&store, 1).await.lease_until.expect("leased");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    // Its own executor never expires its lease; another one does once it lapsed.
    assert!(store
        .expire_task_leases(dead.clone(), 60_000)
        .await
        .expect("expire")
        .is_empty());
    // A renewal under a stale claim does nothing.
    assert_eq!(
        store
            .renew_task_leases(vec![(id(1), claimed.claim_seq + 1)], 60_000)
            .await
            .expect("renew"),
        []
    );
    let expired = store
        .expire_task_leases("host:alive".into(), 60_000)
        .await
        .expect("expire");
    assert_eq!(
        expired,
        [Orphaned {
            id: id(1),
            task_type: "backup".into(),
            attempt: 1,
            claim_seq: claimed.claim_seq + 1,
            code: "lease_expired".into(),
            host: "boot/ns".into(),
            lease_until,
            kill_grace_ms: spool_store::tasks::DEFAULT_KILL_GRACE_MS,
        }]
    );
    let t = task(&store, 1).await;
    assert_eq!(
        (t.status, t.ending.as_deref(), t.executor_id.as_deref()),
        (
            TaskStatus::Running,
            Some("lease_expired"),
            Some("host:alive")
        )
    );
    // The old executor's renewal is refused from now on: it must stop its attempt. The new one
    // renews it, and learns of a cancel through it.
    assert_eq!(
        store
            .renew_task_leases(vec![(id(1), claimed.claim_seq)], 60_000)
            .await
            .expect("renew"),
        []
    );
    store.cancel_task(id(1)).await.expect("cancel");
    assert_eq!(
        store
            .renew_task_leases(vec![(id(1), expired[0].claim_seq)], 60_000)
            .await
            .expect("renew"),
        [Renewed {
            id: id(1),
            cancel_requested: true,
        }]
    );
    // A renewed lease does not lapse.
    submit(&store, new_task(2, None, "{}")).await;
    let second = store
        .claim_tasks(1, vec!["backup".into()], 1, "host:b".into())
        .await
        .expect("claim")
        .tasks
        .remove(0);
    assert_eq!(
        store
            .renew_task_leases(vec![(id(2), second.claim_seq)], 60_000)
            .await
            .expect("renew"),
        [Renewed {
            id: id(2),
            cancel_requested: false,
        }]
    );
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert!(store
        .expire_task_leases("host:alive".into(), 60_000)
        .await
        .expect("expire")
        .is_empty());
}

//! The store contract, written once against [`Store`] and run against every backend.
//!
//! Every test here uses only the public `Store` API, so a second backend is held to exactly the
//! same rules as SQLite. A backend implements [`Backend`] and calls `conformance_suite!` once.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use spool_store::model::{
    Applied, Attempt, AttemptResult, Body, Check, CheckResult, CheckVerdict, Claimed, Delivery,
    DeliveryStatus, Disposition, ImportOutcome, InsertOutcome, Mode, NewDelivery, Reclaimed,
    Reservation, Resolution, StartOutcome, Taken, TransitionOutcome, MAX_ERROR_BYTES,
};
use spool_store::{Capacity, Store};
use tokio::task::JoinSet;

mod tasks;
pub use tasks::*;

/// What the suite needs from a backend: a fresh, empty store, and a way to reopen the same
/// database with an admission limit.
pub trait Backend: Sized {
    /// A new, empty database and a store on it. `Self` keeps the database alive for the test.
    /// `None`: the backend cannot be tested here (no server configured); the test skips, after
    /// the backend said why.
    fn fresh() -> impl Future<Output = Option<(Self, Store)>> + Send;

    /// Close `store` and open the same database again, refusing new work past `max_db_bytes`.
    fn reopen(&self, store: Store, max_db_bytes: u64) -> impl Future<Output = Store> + Send;
}

/// Instantiate every conformance test for one [`Backend`] type.
macro_rules! conformance_suite {
    ($backend:ty) => {
        $crate::conformance::conformance_suite!(@store $backend;
            insert_round_trips_exactly,
            insert_schedules_by_not_before,
            idempotent_insert_returns_existing,
            idempotency_conflict_on_different_fingerprint,
            passed_deadline_refuses_new_work_but_not_a_duplicate,
            retry_window_sets_the_deadline,
            concurrent_inserts_with_one_key_create_once,
            duplicate_id_is_refused_without_side_effects,
            claim_respects_limit_and_due_order,
            claim_respects_per_origin_capacity,
            claim_skips_saturated_origins,
            claim_past_a_saturated_backlog_by_seek_or_by_scan,
            claim_records_attempt_and_lease,
            claim_fails_expired_instead,
            claim_honours_per_origin_limits,
            reserve_next_takes_one_origins_oldest,
            start_sends_only_a_current_reservation,
            advance_records_starts_and_reserves_as_one,
            take_next_starts_at_least_once_and_only_reserves_at_most_once,
            a_named_secret_comes_with_every_start,
            export_and_import_keep_a_delivery_whole,
            a_key_imported_with_a_v010_digest_finds_the_retried_create,
            release_restores_the_delivery,
            unstart_undoes_an_attempt_never_sent,
            a_gone_url_is_parked_and_unparked_without_its_neighbours,
            expire_overdue_fails_waiting_work,
            retry_clears_a_passed_deadline,
            purge_finished_removes_only_old_terminal_rows,
            complete_succeeded,
            complete_retry_schedules_next_attempt,
            complete_retry_when_exhausted_fails,
            complete_failed,
            complete_interrupted_is_not_charged,
            complete_retry_clamps_to_expiry,
            complete_clips_long_errors,
            complete_after_cancel_is_fenced,
            complete_with_stale_claim_is_fenced,
            completion_follows_the_decision_table,
            cancel_transitions,
            retry_transitions,
            retry_each_and_cancel_each_act_as_the_single_ones,
            recover_interrupts_started_and_releases_reserved,
            renew_and_reclaim_takes_only_lapsed_leases,
            list_paginates_every_row_once,
            list_filters_by_target_and_time_in_either_order,
            list_filters_by_status,
            next_due_and_stats,
            counts_follow_every_change,
            transition_log_follows_every_change,
            at_most_once_unknown_is_never_claimed_and_settled_by_checks,
            at_most_once_checks_are_fenced_by_status,
            recover_makes_started_at_most_once_unknown,
            resolve_transitions,
            cancel_of_at_most_once_in_flight_is_refused,
            retry_of_at_most_once_that_may_have_arrived_is_refused,
            a_late_success_settles_the_unknown_its_attempt_left,
            task_submission_is_idempotent_by_scope_and_key,
            concurrent_task_submissions_create_one,
            task_attempts_retry_then_succeed,
            an_unstarted_attempt_is_given_back,
            task_deadlines_end_waiting_tasks,
            task_cancel_pending_and_running,
            recover_takes_running_tasks_over_until_settled,
            orphans_hold_locks_and_quota_until_settled,
            dead_executors_are_taken_over_at_once,
            a_requested_cancel_wins_over_the_outcome,
            undeclared_types_go_to_review,
            every_task_transition_is_checked,
            finish_and_claim_hands_the_slot_on,
            task_locks_are_all_or_nothing_and_in_order,
            task_quota_limits_running_per_type,
            task_locks_kept_through_backoff_only_when_asked,
            task_steps_are_fenced_and_partial_failures_reviewed,
            task_leases_renew_and_expire_only_for_others,
            ping_writes,
            text_from_outside_is_kept_whatever_it_holds,
            task_results_are_kept_whatever_they_hold,
        );

        #[tokio::test(flavor = "multi_thread")]
        async fn admission_refuses_new_work_but_resolves_duplicates() {
            let Some((backend, store)) =
                <$backend as $crate::conformance::Backend>::fresh().await
            else {
                return;
            };
            $crate::conformance::admission_refuses_new_work_but_resolves_duplicates(
                &backend, store,
            )
            .await;
        }
    };
    (@store $backend:ty; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread")]
            async fn $name() {
                let Some((_backend, store)) =
                    <$backend as $crate::conformance::Backend>::fresh().await
                else {
                    return;
                };
                $crate::conformance::$name(store).await;
            }
        )*
    };
}
pub(crate) use conformance_suite;

/// A deadline this far ahead (ms) is not reached before the creates and claims that come
/// before it in a test, even on a loaded machine; the test then waits for it to pass.
const SOON: i64 = 500;

pub const URL_A: &str = "http://127.0.0.1:8080/hooks/a";
pub const URL_B: &str = "https://127.0.0.2:8443/hooks/b";
pub const ORIGIN_A: &str = "http://127.0.0.1:8080";
pub const ORIGIN_B: &str = "https://127.0.0.2:8443";

/// A 32-hex delivery id; ids sort in the order of `n`.
pub fn id(n: u32) -> String {
    format!("{n:032x}")
}

/// A delivery as the API would hand it to the store: the fingerprint stands for the request
/// content, so two requests to the same URL are "the same" for idempotency.
pub fn new_delivery(id: &str, key: Option<&str>, url: &str) -> NewDelivery {
    NewDelivery {
        id: id.to_owned(),
        idempotency_key: key.map(str::to_owned),
        target_url: url.to_owned(),
        origin: origin_of(url),
        method: "POST".to_owned(),
        headers: vec![("content-type".to_owned(), "application/json".to_owned())],
        body: Body::Json(br#"{"event":"created"}"#.to_vec()),
        max_attempts: 5,
        not_before: None,
        expires_at: None,
        retry_window_ms: None,
        request_digest: url.as_bytes().to_vec(),
        v010_request_hashes: Vec::new(),
        mode: Mode::AtLeastOnce,
        fingerprint: None,
        reconcile: None,
        remote_id_pointer: None,
        observation_window_ms: None,
        sign_secret: None,
    }
}

fn origin_of(url: &str) -> String {
    let host_start = url.find("://").map_or(0, |i| i + 3);
    let end = url[host_start..]
        .find('/')
        .map_or(url.len(), |i| host_start + i);
    url[..end].to_owned()
}

// ---------------------------------------------------------------------------------------------
// insert

pub async fn insert_round_trips_exactly(store: Store) {
    let headers = vec![
        (
            "content-type".to_owned(),
            "application/json; charset=utf-8".to_owned(),
        ),
        ("x-empty".to_owned(), String::new()),
        (
            "x-text".to_owned(),
            "grüße, \"quoted\" \\ back\tslash".to_owned(),
        ),
    ];
    let cases = [
        // Never re-serialised: odd whitespace and key order survive.
        Body::Json(b" {\"b\" :\t1 ,\n \"a\": [ ] }\r\n ".to_vec()),
        Body::Binary(vec![0x00, 0xff, 0x00, 0x7f, 0x80, 0xfe, 0x00]),
        Body::Binary(Vec::new()),
        Body::None,
    ];
    for (n, body) in (1..).zip(cases) {
        let mut new = new_delivery(&id(n), Some(&format!("key-{n}")), URL_A);
        new.method = "PUT".to_owned();
        new.headers = headers.clone();
        new.body = body.clone();
        new.max_attempts = 7;
        let before = store.now_ms();
        let created = create(&store, new).await;
        let after = store.now_ms();

        assert_eq!(created.id, id(n));
        assert_eq!(
            created.idempotency_key.as_deref(),
            Some(&*format!("key-{n}"))
        );
        assert_eq!(created.target_url, URL_A);
        assert_eq!(created.origin, ORIGIN_A);
        assert_eq!(created.method, "PUT");
        assert_eq!(created.headers.as_ref(), Some(&headers));
        assert_eq!(created.body.as_ref(), Some(&body));
        assert_eq!(created.status, DeliveryStatus::Pending);
        assert_eq!(created.attempts, 0);
        assert_eq!(created.uncharged, 0);
        assert_eq!(created.max_attempts, 7);
        assert_eq!(created.cycle, 1);
        assert_eq!(created.last_error, None);
        assert_eq!(created.last_error_code, None);
        assert_eq!(created.last_response_code, None);
        assert!((before..=after).contains(&created.created_at));
        assert_eq!(created.updated_at, created.created_at);
        assert_eq!(created.next_attempt_at, Some(created.created_at));
        assert_eq!(created.not_before, None);
        assert_eq!(created.expires_at, None);
        assert_eq!(created.lease_until, None);

        assert_eq!(get(&store, &id(n)).await, created);
    }
    let unknown = store.get(id(99)).await.expect("get unknown");
    assert_eq!(unknown, None);
}

pub async fn insert_schedules_by_not_before(store: Store) {
    let now = store.now_ms();
    let mut past = new_delivery(&id(1), None, URL_A);
    past.not_before = Some(now - 60_000);
    let mut future = new_delivery(&id(2), None, URL_A);
    future.not_before = Some(now + 60_000);
    future.expires_at = Some(now + 120_000);

    let past = create(&store, past).await;
    let future = create(&store, future).await;
    // A start time in the past means "now", never earlier than the delivery's creation.
    assert_eq!(past.not_before, Some(now - 60_000));
    assert_eq!(past.next_attempt_at, Some(past.created_at));
    assert_eq!(future.not_before, Some(now + 60_000));
    assert_eq!(future.next_attempt_at, Some(now + 60_000));
    assert_eq!(future.expires_at, Some(now + 120_000));
}

pub async fn idempotent_insert_returns_existing(store: Store) {
    let first = create(&store, new_delivery(&id(1), Some("order-1"), URL_A)).await;
    match insert(&store, new_delivery(&id(2), Some("order-1"), URL_A)).await {
        InsertOutcome::Existing(existing) => assert_eq!(existing, first),
        other => panic!("expected Existing, got {other:?}"),
    }
    assert_eq!(store.get(id(2)).await.expect("get"), None);

    // The existing delivery is reported as it is now, not as it was created.
    let claimed = claim(&store, 1).await;
    complete(&store, &claimed[0], Disposition::Succeeded, Some(200)).await;
    match insert(&store, new_delivery(&id(3), Some("order-1"), URL_A)).await {
        InsertOutcome::Existing(existing) => {
            assert_eq!(existing.id, id(1));
            assert_eq!(existing.status, DeliveryStatus::Succeeded);
        }
        other => panic!("expected Existing, got {other:?}"),
    }

    // Without a key, or with another key, the same request is new work.
    create(&store, new_delivery(&id(4), None, URL_A)).await;
    create(&store, new_delivery(&id(5), None, URL_A)).await;
    create(&store, new_delivery(&id(6), Some("order-2"), URL_A)).await;
    assert_eq!(list_ids(&store, None).await, [id(1), id(4), id(5), id(6)]);
}

/// A delivery without a deadline of its own gets one a retry window after it is first due.
pub async fn retry_window_sets_the_deadline(store: Store) {
    let now = store.now_ms();
    let mut windowed = new_delivery(&id(1), None, URL_A);
    windowed.retry_window_ms = Some(60_000);
    windowed.not_before = Some(now + 10_000);
    let d = create(&store, windowed).await;
    assert_eq!(d.expires_at, Some(now + 70_000));
    assert_eq!(get(&store, &id(1)).await.expires_at, Some(now + 70_000));
    // Its own deadline wins.
    let mut own = new_delivery(&id(2), None, URL_A);
    own.retry_window_ms = Some(60_000);
    own.expires_at = Some(now + 5_000);
    assert_eq!(create(&store, own).await.expires_at, Some(now + 5_000));
}

pub async fn passed_deadline_refuses_new_work_but_not_a_duplicate(store: Store) {
    let now = store.now_ms();
    let mut soon = new_delivery(&id(1), Some("report-7"), URL_A);
    soon.expires_at = Some(now + 200);
    let original = create(&store, soon.clone()).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    // The same request again, now that its deadline has passed: the original.
    soon.id = id(2);
    match insert(&store, soon.clone()).await {
        InsertOutcome::Existing(existing) => assert_eq!(existing.id, original.id),
        other => panic!("expected Existing, got {other:?}"),
    }
    // New work with that deadline is refused, and nothing is written.
    soon.id = id(3);
    soon.idempotency_key = Some("report-8".into());
    assert!(
        matches!(insert(&store, soon).await, InsertOutcome::AlreadyExpired),
        "a deadline in the past"
    );
    assert_eq!(list_ids(&store, None).await, [id(1)]);
}

pub async fn idempotency_conflict_on_different_fingerprint(store: Store) {
    create(&store, new_delivery(&id(1), Some("order-1"), URL_A)).await;
    match insert(&store, new_delivery(&id(2), Some("order-1"), URL_B)).await {
        InsertOutcome::Conflict { existing_id } => assert_eq!(existing_id, id(1)),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(store.get(id(2)).await.expect("get"), None);
    assert_eq!(list_ids(&store, None).await, [id(1)]);
}

pub async fn concurrent_inserts_with_one_key_create_once(store: Store) {
    let mut tasks = JoinSet::new();
    for n in 1..=32 {
        let store = store.clone();
        tasks.spawn(async move {
            store
                .insert(new_delivery(&id(n), Some("shared-key"), URL_A))
                .await
                .expect("insert")
        });
    }
    let outcomes = tasks.join_all().await;
    assert_eq!(outcomes.len(), 32);
    let created: Vec<&Delivery> = outcomes
        .iter()
        .filter_map(|o| match o {
            InsertOutcome::Created(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 1, "exactly one insert creates: {outcomes:?}");
    let winner = &created[0].id;
    for outcome in &outcomes {
        match outcome {
            InsertOutcome::Created(d) | InsertOutcome::Existing(d) => assert_eq!(&d.id, winner),
            other => panic!("expected Created or Existing, got {other:?}"),
        }
    }
    assert_eq!(list_ids(&store, None).await, std::slice::from_ref(winner));
}

pub async fn duplicate_id_is_refused_without_side_effects(store: Store) {
    let first = create(&store, new_delivery(&id(1), Some("order-1"), URL_A)).await;

    // Racing valid inserts alongside the bad one: a refused write must not take its neighbours
    // (which may share its transaction) down with it.
    let mut tasks = JoinSet::new();
    for n in 2..=9 {
        let store = store.clone();
        tasks.spawn(async move { (n, store.insert(new_delivery(&id(n), None, URL_A)).await) });
    }
    let dup = store
        .insert(new_delivery(&id(1), Some("order-2"), URL_B))
        .await;
    assert!(dup.is_err(), "an id is never reused: {dup:?}");
    for (n, outcome) in tasks.join_all().await {
        match outcome {
            Ok(InsertOutcome::Created(d)) => assert_eq!(d.id, id(n)),
            other => panic!("insert {n}: expected Created, got {other:?}"),
        }
    }

    assert_eq!(
        get(&store, &id(1)).await,
        first,
        "the first delivery is untouched"
    );
    // The refused insert left no idempotency key behind.
    let again = create(&store, new_delivery(&id(10), Some("order-2"), URL_B)).await;
    assert_eq!(again.id, id(10));
    assert_eq!(
        list_ids(&store, None).await,
        (1..=10).map(id).collect::<Vec<_>>()
    );
}

pub async fn admission_refuses_new_work_but_resolves_duplicates<B: Backend>(
    backend: &B,
    store: Store,
) {
    let first = create(&store, new_delivery(&id(1), Some("order-1"), URL_A)).await;
    let store = backend.reopen(store, 1).await;

    for new in [
        new_delivery(&id(2), Some("order-2"), URL_A),
        new_delivery(&id(3), None, URL_A),
    ] {
        match insert(&store, new).await {
            InsertOutcome::Full { db_bytes, limit } => {
                assert_eq!(limit, 1);
                assert!(db_bytes >= 1, "db_bytes {db_bytes}");
            }
            other => panic!("expected Full, got {other:?}"),
        }
    }
    // A duplicate costs no space, so a full store still answers it.
    match insert(&store, new_delivery(&id(4), Some("order-1"), URL_A)).await {
        InsertOutcome::Existing(existing) => assert_eq!(existing, first),
        other => panic!("expected Existing, got {other:?}"),
    }
    match insert(&store, new_delivery(&id(5), Some("order-1"), URL_B)).await {
        InsertOutcome::Conflict { existing_id } => assert_eq!(existing_id, id(1)),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(list_ids(&store, None).await, [id(1)]);

    // Work already admitted still flows.
    let claimed = claim(&store, 10).await;
    assert_eq!(claimed_ids(&claimed), [id(1)]);
}

// ---------------------------------------------------------------------------------------------
// claim_due

pub async fn claim_respects_limit_and_due_order(store: Store) {
    let now = store.now_ms();
    // Inserted in one order, due in another.
    for (n, offset) in [(1, 300), (2, 100), (3, 200)] {
        let mut new = new_delivery(&id(n), None, URL_A);
        new.not_before = Some(now + offset);
        create(&store, new).await;
    }
    let mut later = new_delivery(&id(4), None, URL_A);
    later.not_before = Some(now + 3_600_000);
    create(&store, later).await;

    wait_until(&store, now + 300).await;
    let none = store
        .claim_due(0, unlimited(), 60_000)
        .await
        .expect("claim nothing");
    assert!(none.claimed.is_empty());
    assert_eq!(claimed_ids(&claim(&store, 2).await), [id(2), id(3)]);
    assert_eq!(claimed_ids(&claim(&store, 10).await), [id(1)]);
    assert!(claim(&store, 10).await.is_empty());

    let later = get(&store, &id(4)).await;
    assert_eq!(later.status, DeliveryStatus::Pending);
    assert_eq!(later.attempts, 0);
    assert_eq!(later.next_attempt_at, Some(now + 3_600_000));
}

pub async fn claim_respects_per_origin_capacity(store: Store) {
    for n in 1..=5 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    create(&store, new_delivery(&id(6), None, URL_B)).await;

    let capacity = Capacity {
        per_origin: 2,
        in_flight: HashMap::new(),
        limits: HashMap::new(),
    };
    let batch = store.claim_due(10, capacity, 60_000).await.expect("claim");
    assert_eq!(
        origin_counts(&batch.claimed),
        [(ORIGIN_A, 2), (ORIGIN_B, 1)]
    );

    // The two in flight for A fill it; B has room but nothing due.
    let full = Capacity {
        per_origin: 2,
        in_flight: HashMap::from([(ORIGIN_A.to_owned(), 2), (ORIGIN_B.to_owned(), 1)]),
        limits: HashMap::new(),
    };
    let batch = store.claim_due(10, full, 60_000).await.expect("claim");
    assert!(batch.claimed.is_empty(), "{:?}", batch.claimed);

    // One of A's finished: room for exactly one more.
    let one_free = Capacity {
        per_origin: 2,
        in_flight: HashMap::from([(ORIGIN_A.to_owned(), 1)]),
        limits: HashMap::new(),
    };
    let batch = store.claim_due(10, one_free, 60_000).await.expect("claim");
    assert_eq!(origin_counts(&batch.claimed), [(ORIGIN_A, 1)]);
    assert_eq!(count_status(&store, DeliveryStatus::Pending).await, 2);
}

pub async fn claim_skips_saturated_origins(store: Store) {
    // A's work is all due before B's, more of it than one candidate fetch: B is reached only if
    // the claim looks past an origin that filled up during the pass.
    for n in 1..=40 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    create(&store, new_delivery(&id(41), None, URL_B)).await;
    let capacity = Capacity {
        per_origin: 2,
        in_flight: HashMap::new(),
        limits: HashMap::new(),
    };
    let batch = store.claim_due(10, capacity, 60_000).await.expect("claim");
    assert_eq!(
        origin_counts(&batch.claimed),
        [(ORIGIN_A, 2), (ORIGIN_B, 1)]
    );
    assert!(claimed_ids(&batch.claimed).contains(&id(41)));

    // An origin saturated before the claim starts is skipped outright.
    create(&store, new_delivery(&id(42), None, URL_B)).await;
    let capacity = Capacity {
        per_origin: 2,
        in_flight: HashMap::from([(ORIGIN_A.to_owned(), 2)]),
        limits: HashMap::new(),
    };
    let batch = store.claim_due(1, capacity, 60_000).await.expect("claim");
    assert_eq!(claimed_ids(&batch.claimed), [id(42)]);

    let next = store
        .next_due(vec![ORIGIN_A.to_owned()])
        .await
        .expect("next_due");
    assert_eq!(next, None, "B has nothing left and A is saturated");
    assert_eq!(count_status(&store, DeliveryStatus::Pending).await, 38);
}

/// One saturated origin owns a large due backlog ahead of everything else. With few other
/// origins the claim seeks each one's oldest due work; with many (more than the store seeks one
/// by one) it reads the due index. Both must find the same work, oldest first, and `next_due`
/// must agree.
pub async fn claim_past_a_saturated_backlog_by_seek_or_by_scan(store: Store) {
    for n in 1..=300 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    let saturated_a = || Capacity {
        per_origin: 1,
        in_flight: HashMap::from([(ORIGIN_A.to_owned(), 1)]),
        limits: HashMap::new(),
    };
    assert!(store
        .claim_due(10, saturated_a(), 60_000)
        .await
        .expect("claim")
        .claimed
        .is_empty());
    assert_eq!(
        store
            .next_due(vec![ORIGIN_A.to_owned()])
            .await
            .expect("next"),
        None
    );

    // Few other origins: one seek each.
    for n in 301..=303 {
        create(
            &store,
            new_delivery(&id(n), None, &format!("http://127.0.0.1:{n}/x")),
        )
        .await;
    }
    let first_other = get(&store, &id(301)).await.next_attempt_at;
    assert_eq!(
        store
            .next_due(vec![ORIGIN_A.to_owned()])
            .await
            .expect("next"),
        first_other
    );
    let batch = store
        .claim_due(2, saturated_a(), 60_000)
        .await
        .expect("claim");
    assert_eq!(claimed_ids(&batch.claimed), [id(301), id(302)]);

    // Many other origins: the index is read from its head, past A's backlog.
    for n in 304..=400 {
        create(
            &store,
            new_delivery(&id(n), None, &format!("http://127.0.0.1:{n}/x")),
        )
        .await;
    }
    assert_eq!(
        store
            .next_due(vec![ORIGIN_A.to_owned()])
            .await
            .expect("next"),
        get(&store, &id(303)).await.next_attempt_at
    );
    let batch = store
        .claim_due(5, saturated_a(), 60_000)
        .await
        .expect("claim");
    assert_eq!(
        claimed_ids(&batch.claimed),
        [id(303), id(304), id(305), id(306), id(307)]
    );
    assert_eq!(
        count_status(&store, DeliveryStatus::Pending).await,
        300 + 93
    );
}

pub async fn claim_records_attempt_and_lease(store: Store) {
    let created = create(&store, new_delivery(&id(1), None, URL_A)).await;
    let before = store.now_ms();
    let batch = store
        .claim_due(10, unlimited(), 30_000)
        .await
        .expect("claim");
    let after = store.now_ms();
    assert_eq!(batch.expired, 0);
    assert_eq!(batch.claimed.len(), 1);
    let c = &batch.claimed[0];
    assert_eq!(c.id, id(1));
    assert_eq!(c.claim_seq, 1);
    assert_eq!(c.attempt, 1);
    assert_eq!(c.target_url, URL_A);
    assert_eq!(c.origin, ORIGIN_A);
    assert_eq!(c.method, "POST");
    assert_eq!(Some(&c.headers), created.headers.as_ref());
    assert_eq!(Some(&c.body), created.body.as_ref());
    assert!((before..=after).contains(&c.started_at));
    assert_eq!(c.lease_until, c.started_at + 30_000);

    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::InFlight);
    assert_eq!(d.attempts, 1);
    assert_eq!(d.uncharged, 0);
    assert_eq!(d.lease_until, Some(c.lease_until));
    assert_eq!(d.updated_at, c.started_at);
    assert_eq!(
        attempts(&store, &id(1)).await,
        [Attempt {
            cycle: 1,
            number: 1,
            started_at: c.started_at,
            finished_at: None,
            outcome: None,
            http_status: None,
            error_code: None,
            error: None,
            duration_ms: None,
        }]
    );
    assert!(claim(&store, 10).await.is_empty(), "in flight is not due");

    complete(&store, c, Disposition::Retry { delay_ms: 0 }, Some(503)).await;
    let again = claim(&store, 10).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].claim_seq, 2);
    assert_eq!(again[0].attempt, 2);
    let history = attempts(&store, &id(1)).await;
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].outcome.as_deref(), Some("retry"));
    assert_eq!(history[1].number, 2);
    assert_eq!(history[1].outcome, None);
}

pub async fn claim_honours_per_origin_limits(store: Store) {
    for n in 1..=3 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
        create(&store, new_delivery(&id(10 + n), None, URL_B)).await;
    }
    // A is paused (limit 0); B may take a single probe (limit 1).
    let capacity = Capacity {
        per_origin: 8,
        in_flight: HashMap::new(),
        limits: HashMap::from([(ORIGIN_A.to_owned(), 0), (ORIGIN_B.to_owned(), 1)]),
    };
    let batch = store
        .claim_due(10, capacity.clone(), 60_000)
        .await
        .expect("claim");
    assert_eq!(origin_counts(&batch.claimed), [(ORIGIN_B, 1)]);
    let next = store
        .next_due(capacity.saturated())
        .await
        .expect("next due");
    assert!(next.is_some(), "B still has due work");
}

pub async fn expire_overdue_fails_waiting_work(store: Store) {
    let now = store.now_ms();
    // Not due for an hour, but its deadline is already over.
    let mut overdue = new_delivery(&id(1), None, URL_A);
    overdue.not_before = Some(now + 3_600_000);
    overdue.expires_at = Some(now + SOON);
    let mut fine = new_delivery(&id(2), None, URL_A);
    fine.expires_at = Some(now + 3_600_000);
    create(&store, overdue).await;
    create(&store, fine).await;
    wait_until(&store, now + SOON + 1).await;
    assert_eq!(store.expire_overdue(10).await.expect("expire"), 1);
    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert_eq!(d.last_error_code.as_deref(), Some("expired"));
    assert_eq!(get(&store, &id(2)).await.status, DeliveryStatus::Pending);
    assert_eq!(store.expire_overdue(10).await.expect("expire"), 0);
}

pub async fn retry_clears_a_passed_deadline(store: Store) {
    let now = store.now_ms();
    let mut d = new_delivery(&id(1), None, URL_A);
    d.expires_at = Some(now + SOON);
    create(&store, d).await;
    wait_until(&store, now + SOON + 1).await;
    assert_eq!(store.expire_overdue(10).await.expect("expire"), 1);
    let retried = match store.retry(id(1)).await.expect("retry") {
        TransitionOutcome::Done(d) => d,
        other => panic!("retry refused: {other:?}"),
    };
    assert_eq!(retried.status, DeliveryStatus::Pending);
    assert_eq!(retried.expires_at, None);
    assert_eq!(claimed_ids(&claim(&store, 10).await), [id(1)]);
}

pub async fn purge_finished_removes_only_old_terminal_rows(store: Store) {
    create(&store, new_delivery(&id(1), Some("k1"), URL_A)).await;
    create(&store, new_delivery(&id(2), None, URL_A)).await;
    let claimed = claim(&store, 1).await;
    complete(&store, &claimed[0], Disposition::Succeeded, Some(200)).await;
    // Finished just now: a one-hour retention keeps it.
    assert_eq!(store.purge_finished(3_600_000, 10).await.expect("purge"), 0);
    // Zero retention: gone, with its attempts and key; the pending one stays.
    let now = store.now_ms();
    wait_until(&store, now + 31).await;
    assert_eq!(store.purge_finished(0, 10).await.expect("purge"), 1);
    assert!(store.get(id(1)).await.expect("get").is_none());
    assert!(store.attempts(id(1)).await.expect("attempts").is_none());
    assert_eq!(get(&store, &id(2)).await.status, DeliveryStatus::Pending);
    match insert(&store, new_delivery(&id(3), Some("k1"), URL_A)).await {
        InsertOutcome::Created(d) => assert_eq!(d.id, id(3)),
        other => panic!("key not released: {other:?}"),
    }
}

pub async fn reserve_next_takes_one_origins_oldest(store: Store) {
    let now = store.now_ms();
    create(&store, new_delivery(&id(1), None, URL_B)).await;
    let mut expired = new_delivery(&id(2), None, URL_A);
    expired.expires_at = Some(now + SOON);
    create(&store, expired).await;
    create(&store, new_delivery(&id(3), None, URL_A)).await;
    create(&store, new_delivery(&id(4), None, URL_A)).await;
    wait_until(&store, now + SOON + 1).await;

    // A's oldest due delivery (B's is not A's; the expired one is failed on the way).
    let next = reserve(&store, ORIGIN_A).await.expect("A has due work");
    assert_eq!(
        (next.id.as_str(), next.origin.as_str()),
        (id(3).as_str(), ORIGIN_A)
    );
    // Reserved: in flight under a new claim, but no attempt has started.
    let d = get(&store, &id(3)).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::InFlight, 0));
    assert!(d.lease_until.is_some());
    assert_eq!(attempts(&store, &id(3)).await, []);
    assert_eq!(
        get(&store, &id(2)).await.last_error_code.as_deref(),
        Some("expired")
    );
    assert_eq!(get(&store, &id(1)).await.status, DeliveryStatus::Pending);
    assert_eq!(reserve(&store, ORIGIN_A).await.map(|r| r.id), Some(id(4)));
    assert!(reserve(&store, ORIGIN_A).await.is_none());
    // Nor does the scheduler's claim take a reserved delivery.
    assert_eq!(claimed_ids(&claim(&store, 10).await), [id(1)]);
}

pub async fn advance_records_starts_and_reserves_as_one(store: Store) {
    for n in 1..=3 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    let first = claim(&store, 1).await.remove(0);
    let second = reserve(&store, ORIGIN_A).await.expect("reserved");

    // The result is recorded, the reserved delivery started, the one after it reserved.
    let advanced = store
        .advance(Some(succeeded(&first)), second.clone(), true, 60_000)
        .await;
    assert_eq!(
        advanced.applied.expect("a result").expect("recorded"),
        Applied::Now(DeliveryStatus::Succeeded)
    );
    let started = match advanced.started.expect("started") {
        StartOutcome::Started(c) => c,
        other => panic!("expected Started, got {other:?}"),
    };
    assert_eq!((started.id.as_str(), started.attempt), (id(2).as_str(), 1));
    assert_eq!(started.claim_seq, second.claim_seq);
    assert_eq!(started.lease_until, started.started_at + 60_000);
    let third = advanced
        .reserved
        .expect("reserve")
        .expect("the third is due");
    assert_eq!(third.id, id(3));
    assert_eq!(get(&store, &id(1)).await.status, DeliveryStatus::Succeeded);
    assert_eq!(attempts(&store, &id(2)).await.len(), 1);
    let d = get(&store, &id(3)).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::InFlight, 0));

    // The next reservation was canceled meanwhile: the result still counts, nothing starts, and
    // with nothing left due nothing is reserved.
    assert!(matches!(
        store.cancel(id(3)).await.expect("cancel"),
        TransitionOutcome::Done(_)
    ));
    let advanced = store
        .advance(Some(succeeded(&started)), third, true, 60_000)
        .await;
    assert_eq!(
        advanced.applied.expect("a result").expect("recorded"),
        Applied::Now(DeliveryStatus::Succeeded)
    );
    assert!(matches!(
        advanced.started.expect("start"),
        StartOutcome::NotCurrent
    ));
    assert_eq!(advanced.reserved.expect("reserve"), None);
    assert_eq!(attempts(&store, &id(3)).await, []);
    assert_eq!(
        log_of(&store, &id(2)).await,
        [
            (None, "pending", 0, "created".to_owned()),
            (Some("pending"), "in_flight", 0, "reserved".to_owned()),
            (Some("in_flight"), "succeeded", 1, "delivered".to_owned()),
        ]
    );

    // Without a result (a slot starting an attempt ahead of its turn): nothing is recorded,
    // the reservation starts and the next is reserved.
    for n in 4..=5 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    let fourth = reserve(&store, ORIGIN_A).await.expect("reserved");
    let advanced = store.advance(None, fourth, true, 60_000).await;
    assert!(advanced.applied.is_none());
    match advanced.started.expect("start") {
        StartOutcome::Started(c) => assert_eq!((c.id.as_str(), c.attempt), (id(4).as_str(), 1)),
        other => panic!("expected Started, got {other:?}"),
    }
    let fifth = advanced
        .reserved
        .expect("reserve")
        .expect("the fifth is due");
    assert_eq!(fifth.id, id(5));
    assert_eq!(get(&store, &id(2)).await.status, DeliveryStatus::Succeeded);
    assert_eq!(attempts(&store, &id(4)).await.len(), 1);

    // Asked not to reserve after it: the reservation starts, nothing more is reserved.
    create(&store, new_delivery(&id(6), None, URL_A)).await;
    let advanced = store.advance(None, fifth, false, 60_000).await;
    match advanced.started.expect("start") {
        StartOutcome::Started(c) => assert_eq!(c.id, id(5)),
        other => panic!("expected Started, got {other:?}"),
    }
    assert_eq!(advanced.reserved.expect("no reservation"), None);
    assert_eq!(get(&store, &id(6)).await.status, DeliveryStatus::Pending);
}

/// A delivery imported from a spoold v0.1.0 journal keeps that daemon's digest as its key's:
/// a create carrying the same v0.1.0 digest finds it, whatever its own digest; one without it,
/// or with another, conflicts; spoold's own digest still finds a key stored with it.
pub async fn a_key_imported_with_a_v010_digest_finds_the_retried_create(store: Store) {
    create(&store, new_delivery(&id(1), Some("native"), URL_A)).await;
    let mut record = store.export(id(1)).await.expect("export").expect("record");
    record.delivery.id = id(2);
    record.delivery.idempotency_key = Some("from-go".to_owned());
    record.request_digest = Some(vec![7; 32]);
    assert_eq!(
        store.import(record).await.expect("import"),
        ImportOutcome::Imported
    );
    let retried = |v010: Option<Vec<u8>>, key: &str| NewDelivery {
        v010_request_hashes: v010.into_iter().collect(),
        ..new_delivery(&id(3), Some(key), URL_A)
    };
    match insert(&store, retried(Some(vec![7; 32]), "from-go")).await {
        InsertOutcome::Existing(d) => assert_eq!(d.id, id(2)),
        other => panic!("the retried create should find the import, got {other:?}"),
    }
    for v010 in [None, Some(vec![8; 32])] {
        match insert(&store, retried(v010, "from-go")).await {
            InsertOutcome::Conflict { existing_id } => assert_eq!(existing_id, id(2)),
            other => panic!("expected a conflict, got {other:?}"),
        }
    }
    // A key stored by a create is found by spoold's own digest, the v0.1.0 one aside.
    match insert(&store, retried(Some(vec![7; 32]), "native")).await {
        InsertOutcome::Existing(d) => assert_eq!(d.id, id(1)),
        other => panic!("expected the native delivery, got {other:?}"),
    }
    assert_eq!(
        store.get(id(3)).await.expect("get"),
        None,
        "nothing created"
    );
}

/// An exported delivery imported elsewhere is the same delivery, history and all, and goes
/// on from where it was; an import never overwrites: the same id and request is `Existing`,
/// anything else under a taken id or key a `Conflict`.
pub async fn export_and_import_keep_a_delivery_whole(store: Store) {
    let mut new = new_delivery(&id(1), Some("order-1"), URL_A);
    new.body = Body::Binary(vec![0, 255, 10, 13, 0]);
    new.headers
        .push(("x-token".to_owned(), "s3cr3t".to_owned()));
    new.sign_secret = Some("billing".to_owned());
    create(&store, new).await;
    let first = claim(&store, 1).await.remove(0);
    complete(
        &store,
        &first,
        Disposition::Retry { delay_ms: 0 },
        Some(503),
    )
    .await;
    let second = claim(&store, 1).await.remove(0);
    complete(&store, &second, Disposition::Succeeded, Some(200)).await;
    create(&store, new_delivery(&id(2), None, URL_A)).await;

    let record = store
        .export(id(1))
        .await
        .expect("export")
        .expect("the delivery");
    assert_eq!(
        record.delivery.body,
        Some(Body::Binary(vec![0, 255, 10, 13, 0]))
    );
    assert_eq!(record.request_digest.as_deref(), Some(URL_A.as_bytes()));
    assert_eq!(record.attempts.len(), 2);
    assert_eq!(
        record
            .transitions
            .iter()
            .map(|t| t.reason.as_str())
            .collect::<Vec<_>>(),
        ["created", "claimed", "http_status", "claimed", "delivered"]
    );
    assert_eq!(store.export(id(9)).await.expect("export"), None);

    // Here already: the same request is left alone; another under its id or key conflicts.
    assert_eq!(
        store.import(record.clone()).await.expect("import"),
        ImportOutcome::Existing
    );
    let mut changed = record.clone();
    changed.delivery.target_url = URL_B.to_owned();
    assert_eq!(
        store.import(changed).await.expect("import"),
        ImportOutcome::Conflict { existing_id: id(1) }
    );
    let mut same_key = record.clone();
    same_key.delivery.id = id(3);
    assert_eq!(
        store.import(same_key).await.expect("import"),
        ImportOutcome::Conflict { existing_id: id(1) }
    );
    assert_eq!(store.get(id(3)).await.expect("get"), None, "nothing kept");

    // Imported under a new id and key: exported again, it is the same record.
    let mut copy = record.clone();
    copy.delivery.id = id(4);
    copy.delivery.idempotency_key = Some("order-4".to_owned());
    assert_eq!(
        store.import(copy.clone()).await.expect("import"),
        ImportOutcome::Imported
    );
    assert_eq!(
        store.export(id(4)).await.expect("export").expect("copy"),
        copy
    );

    // A pending delivery imported goes on: claimed, its next attempt continues the history.
    let mut pending = store.export(id(2)).await.expect("export").expect("pending");
    pending.delivery.id = id(5);
    assert_eq!(
        store.import(pending).await.expect("import"),
        ImportOutcome::Imported
    );
    store.cancel(id(2)).await.expect("cancel the original");
    let claimed = claim(&store, 1).await.remove(0);
    assert_eq!(claimed.id, id(5));
    complete(&store, &claimed, Disposition::Succeeded, Some(200)).await;
    let log = store
        .transitions(id(5))
        .await
        .expect("transitions")
        .expect("log");
    assert_eq!(
        log.iter().map(|t| t.reason.as_str()).collect::<Vec<_>>(),
        ["created", "claimed", "delivered"]
    );
    let stats = store.stats().await.expect("stats");
    let count = |status| {
        stats
            .by_status
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(
        [DeliveryStatus::Succeeded, DeliveryStatus::Canceled].map(count),
        [3, 1],
        "imports are counted"
    );
}

/// The secret a create names to sign its attempts is kept (its name) and handed out with
/// every start: by a claim, by a take, and by the start of a reservation; the deliveries
/// waiting to be sent that name it are counted (what a reload that removes it warns of).
pub async fn a_named_secret_comes_with_every_start(store: Store) {
    let signed = |mut d: NewDelivery| {
        d.sign_secret = Some("billing".to_owned());
        d
    };
    create(&store, signed(new_delivery(&id(1), None, URL_A))).await;
    create(&store, signed(new_delivery(&id(2), None, URL_A))).await;
    create(&store, signed(at_most_once(&id(3)))).await;
    create(&store, new_delivery(&id(4), None, URL_A)).await;
    assert_eq!(
        get(&store, &id(1)).await.sign_secret.as_deref(),
        Some("billing")
    );
    assert_eq!(get(&store, &id(4)).await.sign_secret, None);
    let waiting = |name: &str| store.waiting_on_secret(name.to_owned());
    assert_eq!(waiting("billing").await.expect("count"), 3);
    assert_eq!(waiting("ops").await.expect("count"), 0);

    let first = claim(&store, 1).await.remove(0);
    // In flight still waits to be sent.
    assert_eq!(waiting("billing").await.expect("count"), 3);
    assert_eq!(
        (first.id.as_str(), first.sign_secret.as_deref()),
        (id(1).as_str(), Some("billing"))
    );
    let took = store
        .take_next(Some(succeeded(&first)), ORIGIN_A.to_owned(), 60_000)
        .await;
    match took.taken.expect("take") {
        Some(Taken::Started(c)) => assert_eq!(
            (c.id.as_str(), c.sign_secret.as_deref()),
            (id(2).as_str(), Some("billing"))
        ),
        other => panic!("expected Started, got {other:?}"),
    }
    // The succeeded one no longer does.
    assert_eq!(waiting("billing").await.expect("count"), 2);
    let took = store.take_next(None, ORIGIN_A.to_owned(), 60_000).await;
    let reserved = match took.taken.expect("take") {
        Some(Taken::Reserved(r)) => r,
        other => panic!("expected Reserved, got {other:?}"),
    };
    match store.start(reserved, 60_000).await.expect("start") {
        StartOutcome::Started(c) => assert_eq!(
            (c.id.as_str(), c.sign_secret.as_deref()),
            (id(3).as_str(), Some("billing"))
        ),
        other => panic!("expected Started, got {other:?}"),
    }
    let took = store.take_next(None, ORIGIN_A.to_owned(), 60_000).await;
    match took.taken.expect("take") {
        Some(Taken::Started(c)) => {
            assert_eq!((c.id.as_str(), c.sign_secret), (id(4).as_str(), None));
        }
        other => panic!("expected Started, got {other:?}"),
    }
}

pub async fn take_next_starts_at_least_once_and_only_reserves_at_most_once(store: Store) {
    let now = store.now_ms();
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let mut expired = new_delivery(&id(2), None, URL_A);
    expired.expires_at = Some(now + SOON);
    create(&store, expired).await;
    create(&store, new_delivery(&id(3), None, URL_A)).await;
    create(&store, at_most_once(&id(4))).await;
    create(&store, new_delivery(&id(5), None, URL_B)).await;
    wait_until(&store, now + SOON + 1).await;
    let first = claim(&store, 1).await.remove(0);
    assert_eq!(first.id, id(1));

    // The result is recorded and the next at-least-once delivery of the origin claimed with its
    // attempt started (the expired one failed on the way), as one step.
    let took = store
        .take_next(Some(succeeded(&first)), ORIGIN_A.to_owned(), 60_000)
        .await;
    assert_eq!(
        took.applied.expect("a result").expect("recorded"),
        Applied::Now(DeliveryStatus::Succeeded)
    );
    let third = match took.taken.expect("take") {
        Some(Taken::Started(c)) => c,
        other => panic!("expected Started, got {other:?}"),
    };
    assert_eq!((third.id.as_str(), third.attempt), (id(3).as_str(), 1));
    assert_eq!(third.lease_until, third.started_at + 60_000);
    assert_eq!(third.target_url, URL_A);
    let d = get(&store, &id(3)).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::InFlight, 1));
    let recorded = attempts(&store, &id(3)).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].started_at, third.started_at);
    assert_eq!(
        get(&store, &id(2)).await.last_error_code.as_deref(),
        Some("expired")
    );

    // An at-most-once delivery is only reserved: its attempt starts when its turn comes.
    let took = store.take_next(None, ORIGIN_A.to_owned(), 60_000).await;
    assert!(took.applied.is_none());
    let fourth = match took.taken.expect("take") {
        Some(Taken::Reserved(r)) => r,
        other => panic!("expected Reserved, got {other:?}"),
    };
    assert_eq!(fourth.id, id(4));
    let d = get(&store, &id(4)).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::InFlight, 0));
    assert_eq!(attempts(&store, &id(4)).await, []);
    assert!(matches!(
        store.start(fourth, 60_000).await.expect("start"),
        StartOutcome::Started(_)
    ));

    // Nothing more is due for A (B's delivery is not A's).
    let took = store.take_next(None, ORIGIN_A.to_owned(), 60_000).await;
    assert!(took.taken.expect("take").is_none());

    // A taken attempt that is not sent after all is undone like one started ahead.
    assert!(store
        .unstart(third.id.clone(), third.claim_seq)
        .await
        .expect("unstart"));
    let d = get(&store, &id(3)).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Pending, 0));
    assert_eq!(attempts(&store, &id(3)).await, []);
    assert_eq!(
        log_of(&store, &id(3)).await,
        [
            (None, "pending", 0, "created".to_owned()),
            (Some("pending"), "in_flight", 1, "claimed".to_owned()),
            (Some("in_flight"), "pending", 0, "released".to_owned()),
        ]
    );
    assert_eq!(
        log_of(&store, &id(4)).await,
        [
            (None, "pending", 0, "created".to_owned()),
            (Some("pending"), "in_flight", 0, "reserved".to_owned()),
        ]
    );
}

pub async fn start_sends_only_a_current_reservation(store: Store) {
    for n in 1..=2 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }

    // Started: counted, recorded with the time of the start (not of the reservation), leased.
    let first = reserve(&store, ORIGIN_A).await.expect("reserved");
    wait_until(&store, store.now_ms() + 30).await;
    let before = store.now_ms();
    let started = match store.start(first.clone(), 60_000).await.expect("start") {
        StartOutcome::Started(c) => c,
        other => panic!("expected Started, got {other:?}"),
    };
    assert_eq!((started.id.as_str(), started.attempt), (id(1).as_str(), 1));
    assert_eq!(started.claim_seq, first.claim_seq);
    assert_eq!(started.target_url, URL_A);
    assert!(started.started_at >= before);
    assert_eq!(started.lease_until, started.started_at + 60_000);
    let history = attempts(&store, &id(1)).await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].started_at, started.started_at);
    assert_eq!(get(&store, &id(1)).await.attempts, 1);
    // Only once.
    assert!(matches!(
        store.start(first, 60_000).await.expect("start"),
        StartOutcome::NotCurrent
    ));
    assert_eq!(attempts(&store, &id(1)).await.len(), 1);

    // Canceled while reserved: never started, no attempt on record.
    let second = reserve(&store, ORIGIN_A).await.expect("reserved");
    assert_eq!(second.id, id(2));
    assert!(matches!(
        store.cancel(id(2)).await.expect("cancel"),
        TransitionOutcome::Done(_)
    ));
    assert!(matches!(
        store.start(second, 60_000).await.expect("start"),
        StartOutcome::NotCurrent
    ));
    let d = get(&store, &id(2)).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Canceled, 0));
    assert_eq!(attempts(&store, &id(2)).await, []);

    // Its deadline passed while reserved: failed as expired, nothing started. Created only
    // now, and with a second to spare, so that a loaded machine reserves it before then.
    let mut soon = new_delivery(&id(3), None, URL_A);
    let deadline = store.now_ms() + 1_000;
    soon.expires_at = Some(deadline);
    create(&store, soon).await;
    let third = reserve(&store, ORIGIN_A).await.expect("reserved");
    assert_eq!(third.id, id(3));
    wait_until(&store, deadline + 1).await;
    assert!(matches!(
        store.start(third, 60_000).await.expect("start"),
        StartOutcome::Expired
    ));
    let d = get(&store, &id(3)).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Failed, 0));
    assert_eq!(d.last_error_code.as_deref(), Some("expired"));
    assert_eq!(attempts(&store, &id(3)).await, []);
}

pub async fn release_restores_the_delivery(store: Store) {
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let reserved = reserve(&store, ORIGIN_A).await.expect("reserved");
    assert!(store
        .release(reserved.id.clone(), reserved.claim_seq)
        .await
        .expect("release"));
    let d = get(&store, &id(1)).await;
    assert_eq!(
        (d.status, d.attempts, d.lease_until),
        (DeliveryStatus::Pending, 0, None)
    );
    assert_eq!(attempts(&store, &id(1)).await, []);
    // The fence token moved on: the old reservation can neither be released again nor started.
    assert!(!store
        .release(reserved.id.clone(), reserved.claim_seq)
        .await
        .expect("release"));
    let again = claim(&store, 1).await.remove(0);
    assert_eq!(again.attempt, 1);
    assert!(again.claim_seq > reserved.claim_seq);
    assert!(matches!(
        store.start(reserved, 60_000).await.expect("start"),
        StartOutcome::NotCurrent
    ));
    // A started attempt is never released: it may have been sent.
    assert!(!store
        .release(again.id.clone(), again.claim_seq)
        .await
        .expect("release"));
    assert_eq!(get(&store, &id(1)).await.status, DeliveryStatus::InFlight);
    assert_eq!(
        complete(&store, &again, Disposition::Succeeded, Some(200)).await,
        Applied::Now(DeliveryStatus::Succeeded)
    );
}

pub async fn unstart_undoes_an_attempt_never_sent(store: Store) {
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let reserved = reserve(&store, ORIGIN_A).await.expect("reserved");
    let started = match store.start(reserved, 60_000).await.expect("start") {
        StartOutcome::Started(c) => c,
        other => panic!("expected Started, got {other:?}"),
    };
    assert_eq!(started.attempt, 1);
    assert!(store
        .unstart(started.id.clone(), started.claim_seq)
        .await
        .expect("unstart"));
    // As if only reserved and released: pending, no attempt counted or recorded.
    let d = get(&store, &id(1)).await;
    assert_eq!(
        (d.status, d.attempts, d.lease_until),
        (DeliveryStatus::Pending, 0, None)
    );
    assert_eq!(attempts(&store, &id(1)).await, []);
    assert_eq!(
        log_of(&store, &id(1)).await,
        [
            (None, "pending", 0, "created".to_owned()),
            (Some("pending"), "in_flight", 0, "reserved".to_owned()),
            (Some("in_flight"), "pending", 0, "released".to_owned()),
        ]
    );
    // Only once, and only the current claim: its result can no longer be recorded either.
    assert!(!store
        .unstart(started.id.clone(), started.claim_seq)
        .await
        .expect("unstart"));
    assert_eq!(
        complete(&store, &started, Disposition::Succeeded, Some(200)).await,
        Applied::Fenced
    );
    // The next attempt is number 1 again; once it has a result, it is never undone.
    let again = claim(&store, 1).await.remove(0);
    assert_eq!(again.attempt, 1);
    assert_eq!(
        complete(
            &store,
            &again,
            Disposition::Retry { delay_ms: 0 },
            Some(500)
        )
        .await,
        Applied::Now(DeliveryStatus::Pending)
    );
    assert!(!store
        .unstart(again.id.clone(), again.claim_seq)
        .await
        .expect("unstart"));
    assert_eq!(attempts(&store, &id(1)).await.len(), 1);
    assert_eq!(get(&store, &id(1)).await.attempts, 1);
}

pub async fn a_gone_url_is_parked_and_unparked_without_its_neighbours(store: Store) {
    let gone = format!("{ORIGIN_A}/gone");
    let urls = [
        format!("{gone}?team=1"),
        gone.clone(),
        format!("{gone}s"),
        format!("{gone}/deeper"),
        format!("{ORIGIN_A}/other"),
    ];
    for (n, url) in urls.iter().enumerate() {
        create(&store, new_delivery(&id(n as u32 + 1), None, url)).await;
    }
    // One of them claimed and started, as a slot holds it when another request answers 410.
    let took = store.take_next(None, ORIGIN_A.to_owned(), 60_000).await;
    let started = match took.taken.expect("take") {
        Some(Taken::Started(c)) => c,
        other => panic!("expected a started attempt, got {other:?}"),
    };
    assert_eq!(started.id, id(1));
    // The rest of the URL's deliveries are parked (whatever their query), not its neighbours.
    let parked = store
        .park_url(ORIGIN_A.to_owned(), gone.clone())
        .await
        .expect("park_url");
    assert_eq!(parked, 1, "only the pending one to that URL: {}", id(2));
    // The started one given back parked: its attempt undone, not due.
    assert!(store
        .park(started.id.clone(), started.claim_seq, true)
        .await
        .expect("park"));
    let d = get(&store, &id(1)).await;
    assert_eq!(
        (d.status, d.attempts, d.next_attempt_at),
        (DeliveryStatus::Pending, 0, Some(spool_store::model::PARKED))
    );
    assert_eq!(attempts(&store, &id(1)).await, []);
    assert!(!store
        .park(started.id.clone(), started.claim_seq, true)
        .await
        .expect("park again"));
    let mut urls_parked = store.parked_urls(10).await.expect("parked_urls");
    urls_parked.sort();
    assert_eq!(urls_parked, [gone.clone(), format!("{gone}?team=1")]);
    // Listing by the URL finds both, and none of the neighbours.
    let by_url = store
        .list_filtered(
            spool_store::model::ListFilter {
                origin: Some(ORIGIN_A.into()),
                url: Some(gone.clone()),
                ..Default::default()
            },
            10,
            None,
        )
        .await
        .expect("list");
    let listed: Vec<_> = by_url.deliveries.iter().map(|d| d.id.clone()).collect();
    assert_eq!(listed, [id(1), id(2)]);
    // Claims take only the neighbours.
    let mut claimed: Vec<_> = claim(&store, 10).await.into_iter().map(|c| c.id).collect();
    claimed.sort();
    assert_eq!(claimed, [id(3), id(4), id(5)]);
    // Resumed: due now, claimed again.
    let due = store
        .unpark(ORIGIN_A.to_owned(), Some(gone.clone()))
        .await
        .expect("unpark");
    assert_eq!(due, 2);
    let mut claimed: Vec<_> = claim(&store, 10).await.into_iter().map(|c| c.id).collect();
    claimed.sort();
    assert_eq!(claimed, [id(1), id(2)]);
    assert!(store.parked_urls(10).await.expect("parked_urls").is_empty());
}

pub async fn claim_fails_expired_instead(store: Store) {
    let now = store.now_ms();
    let mut late = new_delivery(&id(1), None, URL_A);
    late.expires_at = Some(now + SOON);
    let mut timely = new_delivery(&id(2), None, URL_A);
    timely.expires_at = Some(now + 3_600_000);
    create(&store, late).await;
    create(&store, timely).await;
    wait_until(&store, now + SOON + 1).await;

    let batch = store
        .claim_due(10, unlimited(), 60_000)
        .await
        .expect("claim");
    assert_eq!(claimed_ids(&batch.claimed), [id(2)]);
    assert_eq!(batch.expired, 1);

    let expired = get(&store, &id(1)).await;
    assert_eq!(expired.status, DeliveryStatus::Failed);
    assert_eq!(expired.last_error_code.as_deref(), Some("expired"));
    assert!(expired.last_error.is_some());
    assert_eq!(expired.attempts, 0);
    assert_eq!(expired.next_attempt_at, None);
    assert_eq!(expired.lease_until, None);
    assert_eq!(attempts(&store, &id(1)).await, []);

    let batch = store
        .claim_due(10, unlimited(), 60_000)
        .await
        .expect("claim");
    assert!(batch.claimed.is_empty());
    assert_eq!(batch.expired, 0, "an expired delivery is counted once");
}

// ---------------------------------------------------------------------------------------------
// complete

pub async fn complete_succeeded(store: Store) {
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let claimed = claim(&store, 1).await;
    let before = store.now_ms();
    let applied = store
        .complete(AttemptResult {
            id: id(1),
            claim_seq: claimed[0].claim_seq,
            disposition: Disposition::Succeeded,
            http_status: Some(204),
            error_code: None,
            error: None,
            duration_ms: 42,
            remote_id: None,
        })
        .await
        .expect("complete");
    let after = store.now_ms();
    assert_eq!(applied, Applied::Now(DeliveryStatus::Succeeded));

    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Succeeded);
    assert_eq!(d.last_response_code, Some(204));
    assert_eq!(d.last_error, None);
    assert_eq!(d.last_error_code, None);
    assert_eq!(d.next_attempt_at, None);
    assert_eq!(d.lease_until, None);
    assert_eq!(d.attempts, 1);

    let history = attempts(&store, &id(1)).await;
    assert_eq!(history.len(), 1);
    let a = &history[0];
    assert_eq!(a.outcome.as_deref(), Some("succeeded"));
    assert_eq!(a.http_status, Some(204));
    assert_eq!(a.duration_ms, Some(42));
    assert!(a.finished_at.is_some_and(|t| (before..=after).contains(&t)));
    assert!(claim(&store, 10).await.is_empty());
}

pub async fn complete_retry_schedules_next_attempt(store: Store) {
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let claimed = claim(&store, 1).await;
    let before = store.now_ms();
    let applied = store
        .complete(AttemptResult {
            id: id(1),
            claim_seq: claimed[0].claim_seq,
            disposition: Disposition::Retry { delay_ms: 60_000 },
            http_status: Some(503),
            error_code: Some("http_status".to_owned()),
            error: Some("503 Service Unavailable".to_owned()),
            duration_ms: 7,
            remote_id: None,
        })
        .await
        .expect("complete");
    let after = store.now_ms();
    assert_eq!(applied, Applied::Now(DeliveryStatus::Pending));

    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Pending);
    let next = d.next_attempt_at.expect("scheduled");
    assert!(
        (before + 60_000..=after + 60_000).contains(&next),
        "next_attempt_at {next} not within [{before}, {after}] + 60s"
    );
    assert_eq!(d.last_response_code, Some(503));
    assert_eq!(d.last_error_code.as_deref(), Some("http_status"));
    assert_eq!(d.last_error.as_deref(), Some("503 Service Unavailable"));
    assert_eq!(d.lease_until, None);
    assert_eq!(d.attempts, 1);
    assert_eq!(
        attempts(&store, &id(1)).await[0].outcome.as_deref(),
        Some("retry")
    );
    assert!(claim(&store, 10).await.is_empty(), "not due for a minute");
    assert_eq!(
        store.next_due(Vec::new()).await.expect("next_due"),
        Some(next)
    );
}

pub async fn complete_retry_when_exhausted_fails(store: Store) {
    let mut new = new_delivery(&id(1), None, URL_A);
    new.max_attempts = 2;
    create(&store, new).await;

    let first = claim(&store, 1).await;
    let applied = complete(
        &store,
        &first[0],
        Disposition::Retry { delay_ms: 0 },
        Some(500),
    )
    .await;
    assert_eq!(applied, Applied::Now(DeliveryStatus::Pending));
    let second = claim(&store, 1).await;
    assert_eq!(second[0].attempt, 2);
    let applied = complete(
        &store,
        &second[0],
        Disposition::Retry { delay_ms: 0 },
        Some(502),
    )
    .await;
    assert_eq!(applied, Applied::Now(DeliveryStatus::Failed));

    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert_eq!(d.attempts, 2);
    assert_eq!(d.last_response_code, Some(502));
    assert_eq!(d.next_attempt_at, None);
    assert!(claim(&store, 10).await.is_empty());
    let outcomes: Vec<Option<String>> = attempts(&store, &id(1))
        .await
        .into_iter()
        .map(|a| a.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [Some("retry".to_owned()), Some("failed".to_owned())],
        "the attempt that used up the budget is recorded as failed"
    );

    let mut single = new_delivery(&id(2), None, URL_A);
    single.max_attempts = 1;
    create(&store, single).await;
    let only = claim(&store, 1).await;
    let applied = complete(&store, &only[0], Disposition::Retry { delay_ms: 0 }, None).await;
    assert_eq!(applied, Applied::Now(DeliveryStatus::Failed));
}

pub async fn complete_failed(store: Store) {
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let claimed = claim(&store, 1).await;
    let applied = store
        .complete(AttemptResult {
            id: id(1),
            claim_seq: claimed[0].claim_seq,
            disposition: Disposition::Failed,
            http_status: Some(404),
            error_code: Some("http_status".to_owned()),
            error: Some("404 Not Found".to_owned()),
            duration_ms: 3,
            remote_id: None,
        })
        .await
        .expect("complete");
    assert_eq!(applied, Applied::Now(DeliveryStatus::Failed));

    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert_eq!(d.attempts, 1, "a permanent failure ends the budget early");
    assert_eq!(d.last_response_code, Some(404));
    assert_eq!(d.last_error_code.as_deref(), Some("http_status"));
    assert_eq!(d.last_error.as_deref(), Some("404 Not Found"));
    assert_eq!(d.next_attempt_at, None);
    assert_eq!(d.lease_until, None);
    let history = attempts(&store, &id(1)).await;
    assert_eq!(history[0].outcome.as_deref(), Some("failed"));
    assert_eq!(history[0].error.as_deref(), Some("404 Not Found"));
    assert_eq!(history[0].error_code.as_deref(), Some("http_status"));
}

pub async fn complete_interrupted_is_not_charged(store: Store) {
    let mut new = new_delivery(&id(1), None, URL_A);
    new.max_attempts = 1;
    create(&store, new).await;

    let first = claim(&store, 1).await;
    let before = store.now_ms();
    let applied = complete(&store, &first[0], Disposition::Interrupted, None).await;
    assert_eq!(applied, Applied::Now(DeliveryStatus::Pending));
    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Pending);
    assert_eq!(d.attempts, 1);
    assert_eq!(d.uncharged, 1);
    assert_eq!(d.lease_until, None);
    let due = d.next_attempt_at.expect("due again");
    assert!(due >= before && due <= store.now_ms(), "due at once");

    // The only allowed attempt was not spent: it can be claimed again...
    let second = claim(&store, 1).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempt, 2, "the attempt header still counts up");
    assert_eq!(second[0].claim_seq, first[0].claim_seq + 1);
    // ...and that one is charged.
    let applied = complete(
        &store,
        &second[0],
        Disposition::Retry { delay_ms: 0 },
        Some(500),
    )
    .await;
    assert_eq!(applied, Applied::Now(DeliveryStatus::Failed));

    let outcomes: Vec<Option<String>> = attempts(&store, &id(1))
        .await
        .into_iter()
        .map(|a| a.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [Some("interrupted".to_owned()), Some("failed".to_owned())]
    );
    let d = get(&store, &id(1)).await;
    assert_eq!((d.attempts, d.uncharged), (2, 1));
}

pub async fn complete_retry_clamps_to_expiry(store: Store) {
    let now = store.now_ms();
    let mut new = new_delivery(&id(1), None, URL_A);
    new.expires_at = Some(now + 60_000);
    create(&store, new).await;
    let claimed = claim(&store, 1).await;
    let applied = complete(
        &store,
        &claimed[0],
        Disposition::Retry {
            delay_ms: 3_600_000,
        },
        Some(503),
    )
    .await;
    assert_eq!(applied, Applied::Now(DeliveryStatus::Pending));
    let d = get(&store, &id(1)).await;
    assert_eq!(d.next_attempt_at, Some(now + 60_000));
}

pub async fn complete_clips_long_errors(store: Store) {
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let claimed = claim(&store, 1).await;
    let long = "é".repeat(MAX_ERROR_BYTES); // twice the limit in bytes
    store
        .complete(AttemptResult {
            id: id(1),
            claim_seq: claimed[0].claim_seq,
            disposition: Disposition::Retry { delay_ms: 0 },
            http_status: None,
            error_code: Some("connect".to_owned()),
            error: Some(long.clone()),
            duration_ms: 1,
            remote_id: None,
        })
        .await
        .expect("complete");
    let kept = get(&store, &id(1)).await.last_error.expect("last_error");
    assert_eq!(kept.len(), MAX_ERROR_BYTES);
    assert!(long.starts_with(&kept));
    let history = attempts(&store, &id(1)).await;
    assert_eq!(history[0].error.as_deref(), Some(&*kept));
}

// ---------------------------------------------------------------------------------------------
// fencing

pub async fn complete_after_cancel_is_fenced(store: Store) {
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let claimed = claim(&store, 1).await;
    match store.cancel(id(1)).await.expect("cancel") {
        TransitionOutcome::Done(d) => {
            assert_eq!(d.status, DeliveryStatus::Canceled);
            assert_eq!(d.lease_until, None);
        }
        other => panic!("expected Done, got {other:?}"),
    }
    let applied = complete(&store, &claimed[0], Disposition::Succeeded, Some(200)).await;
    assert_eq!(applied, Applied::Fenced);

    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Canceled);
    assert_eq!(
        d.last_response_code, None,
        "a fenced result leaves the delivery alone"
    );
    let history = attempts(&store, &id(1)).await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].outcome.as_deref(), Some("succeeded"));
    assert_eq!(history[0].http_status, Some(200));
}

pub async fn complete_with_stale_claim_is_fenced(store: Store) {
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let stale = claim(&store, 1).await;
    assert_eq!(store.recover(5_000).await.expect("recover").total(), 1);
    let current = claim(&store, 1).await;
    assert_eq!(current[0].claim_seq, stale[0].claim_seq + 1);

    let applied = complete(&store, &stale[0], Disposition::Failed, Some(400)).await;
    assert_eq!(applied, Applied::Fenced);
    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::InFlight);
    assert_eq!(d.last_response_code, None);

    let applied = complete(&store, &current[0], Disposition::Succeeded, Some(200)).await;
    assert_eq!(applied, Applied::Now(DeliveryStatus::Succeeded));
    // Reporting the same attempt twice changes nothing the second time.
    let applied = complete(&store, &current[0], Disposition::Failed, Some(500)).await;
    assert_eq!(applied, Applied::Fenced);
    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Succeeded);
    assert_eq!(d.last_response_code, Some(200));

    let outcomes: Vec<(Option<String>, Option<u16>)> = attempts(&store, &id(1))
        .await
        .into_iter()
        .map(|a| (a.outcome, a.http_status))
        .collect();
    assert_eq!(
        outcomes,
        [
            (Some("interrupted".to_owned()), None),
            (Some("succeeded".to_owned()), Some(200)),
        ],
        "the reclaim recorded the first attempt; its late result does not overwrite it"
    );

    let unknown = store
        .complete(AttemptResult {
            id: id(99),
            claim_seq: 1,
            disposition: Disposition::Succeeded,
            http_status: Some(200),
            error_code: None,
            error: None,
            duration_ms: 0,
            remote_id: None,
        })
        .await
        .expect("complete unknown");
    assert_eq!(unknown, Applied::Fenced);
}

// ---------------------------------------------------------------------------------------------
// operator transitions

/// Every backend does what `Completion::decide` says, case by case: a delivery is brought to
/// an attempt with the case's budget (charged retries and uncharged interruptions before it)
/// and deadline, its result is recorded, and the delivery, its attempt and its transition are
/// compared with the decision for the row as it was and the time the store recorded. SQLite
/// calls the function; PostgreSQL's `spoold_steps` must agree with it.
pub async fn completion_follows_the_decision_table(store: Store) {
    use spool_store::transitions::{Completion, InFlight};
    let unknown = Disposition::Unknown { check_in_ms: 2_000 };
    // (disposition, error code, max attempts, retries before, interruptions before,
    //  expires in ms, at most once)
    type Case = (
        Disposition,
        Option<&'static str>,
        u32,
        u32,
        u32,
        Option<i64>,
        bool,
    );
    #[rustfmt::skip]
    let cases: [Case; 11] = [
        (Disposition::Succeeded, None, 3, 0, 0, None, false),
        (Disposition::Succeeded, None, 3, 2, 0, None, false),
        (Disposition::Retry { delay_ms: 5_000 }, Some("http_status"), 3, 0, 0, None, false),
        (Disposition::Retry { delay_ms: 3_600_000 }, None, 3, 0, 0, Some(60_000), false),
        (Disposition::Retry { delay_ms: 0 }, Some("timeout"), 2, 1, 0, None, false),
        (Disposition::Retry { delay_ms: 5_000 }, None, 3, 1, 1, None, false),
        (Disposition::Retry { delay_ms: 5_000 }, Some("connect_failed"), 2, 1, 1, None, false),
        (Disposition::Failed, Some("http_status"), 3, 0, 0, None, false),
        (Disposition::Failed, None, 3, 1, 0, None, false),
        (Disposition::Interrupted, Some("shutdown"), 1, 0, 0, None, false),
        (unknown, Some("timeout"), 3, 0, 0, None, true),
    ];
    for (n, (disposition, code, max, retries, interruptions, expires_in, amo)) in
        cases.into_iter().enumerate()
    {
        let case = format!("case {n}: {disposition:?} {code:?} max {max}");
        let delivery = id(100 + n as u32);
        let mut new = if amo {
            at_most_once(&delivery)
        } else {
            new_delivery(&delivery, None, URL_A)
        };
        new.max_attempts = max;
        new.expires_at = expires_in.map(|ms| store.now_ms() + ms);
        create(&store, new).await;
        let mut before = Vec::new();
        before.extend(std::iter::repeat_n(
            Disposition::Retry { delay_ms: 0 },
            retries as usize,
        ));
        before.extend(std::iter::repeat_n(
            Disposition::Interrupted,
            interruptions as usize,
        ));
        for earlier in before {
            let claimed = claim(&store, 10).await;
            assert_eq!(claimed.len(), 1, "{case}: only this delivery is due");
            complete(&store, &claimed[0], earlier, None).await;
        }
        let claimed = claim(&store, 10).await;
        assert_eq!(claimed.len(), 1, "{case}: only this delivery is due");
        let row = get(&store, &delivery).await;
        let read = InFlight {
            attempts: row.attempts,
            uncharged: row.uncharged,
            max_attempts: row.max_attempts,
            expires_at: row.expires_at,
        };
        let result = AttemptResult {
            id: delivery.clone(),
            claim_seq: claimed[0].claim_seq,
            disposition,
            http_status: Some(503),
            error_code: code.map(str::to_owned),
            error: code.map(|c| format!("it went {c}")),
            duration_ms: 3,
            remote_id: None,
        };
        let applied = store.complete(result.clone()).await.expect("complete");
        let d = get(&store, &delivery).await;
        let want = Completion::decide(&read, &result, d.updated_at);
        assert_eq!(applied, Applied::Now(want.status), "{case}");
        assert_eq!(
            (d.status, d.next_attempt_at, d.uncharged),
            (want.status, want.next_attempt_at, want.uncharged),
            "{case}"
        );
        assert_eq!(
            (d.unknown_since, d.check_at),
            (want.unknown.map(|u| u.0), want.unknown.map(|u| u.1)),
            "{case}"
        );
        let kept = |v: Option<String>| v.filter(|_| want.keeps_error);
        assert_eq!(
            (d.last_error_code, d.last_error),
            (kept(result.error_code.clone()), kept(result.error.clone())),
            "{case}"
        );
        let last_attempt = attempts(&store, &delivery).await.pop().expect("an attempt");
        assert_eq!(
            last_attempt.outcome.as_deref(),
            Some(want.outcome.as_str()),
            "{case}"
        );
        let log = store
            .transitions(delivery.clone())
            .await
            .expect("transitions")
            .expect("a known delivery");
        let last = log.last().expect("a transition");
        assert_eq!(
            (
                last.from,
                last.to,
                last.reason.as_str(),
                last.note.as_deref()
            ),
            (
                Some(DeliveryStatus::InFlight),
                want.status,
                want.reason,
                want.note
            ),
            "{case}"
        );
        // Out of the way of the next case's claims.
        if matches!(d.status, DeliveryStatus::Pending) {
            store.cancel(delivery.clone()).await.expect("cancel");
        }
    }
}

pub async fn cancel_transitions(store: Store) {
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    match store.cancel(id(1)).await.expect("cancel") {
        TransitionOutcome::Done(d) => {
            assert_eq!(d.id, id(1));
            assert_eq!(d.status, DeliveryStatus::Canceled);
            assert_eq!(d.next_attempt_at, None);
        }
        other => panic!("expected Done, got {other:?}"),
    }
    assert!(
        claim(&store, 10).await.is_empty(),
        "canceled work is not claimed"
    );
    assert_eq!(
        store.cancel(id(1)).await.expect("cancel"),
        TransitionOutcome::Invalid(DeliveryStatus::Canceled)
    );
    assert_eq!(
        store.retry(id(1)).await.expect("retry"),
        TransitionOutcome::Invalid(DeliveryStatus::Canceled)
    );

    create(&store, new_delivery(&id(2), None, URL_A)).await;
    let claimed = claim(&store, 1).await;
    complete(&store, &claimed[0], Disposition::Succeeded, Some(200)).await;
    assert_eq!(
        store.cancel(id(2)).await.expect("cancel"),
        TransitionOutcome::Invalid(DeliveryStatus::Succeeded)
    );
    assert_eq!(get(&store, &id(2)).await.status, DeliveryStatus::Succeeded);

    assert_eq!(
        store.cancel(id(99)).await.expect("cancel"),
        TransitionOutcome::NotFound
    );
}

pub async fn retry_transitions(store: Store) {
    let mut new = new_delivery(&id(1), None, URL_A);
    new.max_attempts = 1;
    create(&store, new).await;
    assert_eq!(
        store.retry(id(1)).await.expect("retry"),
        TransitionOutcome::Invalid(DeliveryStatus::Pending)
    );
    let first = claim(&store, 1).await;
    assert_eq!(
        store.retry(id(1)).await.expect("retry"),
        TransitionOutcome::Invalid(DeliveryStatus::InFlight)
    );
    store
        .complete(AttemptResult {
            id: id(1),
            claim_seq: first[0].claim_seq,
            disposition: Disposition::Retry { delay_ms: 1_000 },
            http_status: Some(500),
            error_code: Some("http_status".to_owned()),
            error: Some("500 Internal Server Error".to_owned()),
            duration_ms: 5,
            remote_id: None,
        })
        .await
        .expect("complete");
    assert_eq!(get(&store, &id(1)).await.status, DeliveryStatus::Failed);

    let before = store.now_ms();
    match store.retry(id(1)).await.expect("retry") {
        TransitionOutcome::Done(d) => {
            assert_eq!(d.status, DeliveryStatus::Pending);
            assert_eq!(d.attempts, 0);
            assert_eq!(d.uncharged, 0);
            assert_eq!(d.cycle, 2);
            assert_eq!(d.last_error, None);
            assert_eq!(d.last_error_code, None);
            assert_eq!(d.last_response_code, None);
            assert!(d.next_attempt_at.is_some_and(|t| t >= before));
        }
        other => panic!("expected Done, got {other:?}"),
    }
    let second = claim(&store, 1).await;
    assert_eq!(second.len(), 1, "retried work is due at once");
    assert_eq!(second[0].attempt, 1, "a new cycle counts from one");
    assert!(second[0].claim_seq > first[0].claim_seq);
    complete(&store, &second[0], Disposition::Succeeded, Some(200)).await;

    let history: Vec<(u32, u32, Option<String>)> = attempts(&store, &id(1))
        .await
        .into_iter()
        .map(|a| (a.cycle, a.number, a.outcome))
        .collect();
    assert_eq!(
        history,
        [
            (1, 1, Some("failed".to_owned())),
            (2, 1, Some("succeeded".to_owned())),
        ]
    );
    assert_eq!(
        store.retry(id(1)).await.expect("retry"),
        TransitionOutcome::Invalid(DeliveryStatus::Succeeded)
    );
    assert_eq!(
        store.retry(id(99)).await.expect("retry"),
        TransitionOutcome::NotFound
    );
    assert_eq!(store.attempts(id(99)).await.expect("attempts"), None);
}

/// The many-at-once retry and cancel of bulk actions judge each delivery as the single ones
/// do, answer in the order asked, and keep the counts by status.
pub async fn retry_each_and_cancel_each_act_as_the_single_ones(store: Store) {
    for n in 1..=3 {
        let mut new = new_delivery(&id(n), None, URL_A);
        new.max_attempts = 1;
        create(&store, new).await;
    }
    // Two fail; the third stays pending.
    for c in claim(&store, 2).await {
        complete(&store, &c, Disposition::Failed, Some(404)).await;
    }
    let statuses = |outcomes: &[TransitionOutcome]| -> Vec<String> {
        outcomes
            .iter()
            .map(|o| match o {
                TransitionOutcome::Done(d) => format!("done {:?}", d.status),
                other => format!("{other:?}"),
            })
            .collect()
    };
    let retried = store
        .retry_each(vec![id(3), id(1), id(99), id(2)])
        .await
        .expect("retry each");
    assert_eq!(
        statuses(&retried),
        [
            "Invalid(Pending)",
            "done Pending",
            "NotFound",
            "done Pending"
        ]
    );
    assert!(
        store
            .next_due(Vec::new())
            .await
            .expect("next due")
            .is_some(),
        "retried work is due"
    );
    let canceled = store
        .cancel_each(vec![id(1), id(2), id(3)])
        .await
        .expect("cancel each");
    assert_eq!(statuses(&canceled), ["done Canceled"; 3]);
    assert_eq!(
        store.cancel_each(vec![id(1)]).await.expect("cancel each"),
        [TransitionOutcome::Invalid(DeliveryStatus::Canceled)]
    );
    let counts = store.stats().await.expect("stats").by_status;
    let count = |s: DeliveryStatus| counts.iter().find(|(x, _)| *x == s).map_or(0, |(_, n)| *n);
    assert_eq!(
        [
            DeliveryStatus::Pending,
            DeliveryStatus::Failed,
            DeliveryStatus::Canceled
        ]
        .map(count),
        [0, 0, 3]
    );
    let log = store
        .transitions(id(1))
        .await
        .expect("transitions")
        .expect("log");
    let reasons: Vec<&str> = log.iter().map(|t| t.reason.as_str()).collect();
    assert!(reasons.ends_with(&["retried", "canceled"]), "{reasons:?}");
}

// ---------------------------------------------------------------------------------------------
// reclaim

pub async fn recover_interrupts_started_and_releases_reserved(store: Store) {
    for n in 1..=2 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    let claimed = claim(&store, 2).await;
    assert_eq!(claimed.len(), 2);
    create(&store, new_delivery(&id(3), None, URL_A)).await;
    let reserved = reserve(&store, ORIGIN_A).await.expect("reserved");
    assert_eq!(reserved.id, id(3));
    create(&store, new_delivery(&id(4), None, URL_A)).await;

    let before = store.now_ms();
    assert_eq!(
        store.recover(5_000).await.expect("recover"),
        Reclaimed {
            interrupted: 2,
            released: 1,
            unknown: 0,
        }
    );
    let after = store.now_ms();
    for n in 1..=2 {
        let d = get(&store, &id(n)).await;
        assert_eq!(d.status, DeliveryStatus::Pending);
        assert_eq!((d.attempts, d.uncharged), (1, 1));
        assert_eq!(d.lease_until, None);
        assert!(d
            .next_attempt_at
            .is_some_and(|t| (before..=after).contains(&t)));
        let history = attempts(&store, &id(n)).await;
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].outcome.as_deref(), Some("interrupted"));
        assert_eq!(history[0].error_code.as_deref(), Some("daemon_restart"));
    }
    // The reservation never started: pending, nothing counted or recorded.
    let d = get(&store, &id(3)).await;
    assert_eq!(
        (d.status, d.attempts, d.uncharged),
        (DeliveryStatus::Pending, 0, 0)
    );
    assert_eq!(attempts(&store, &id(3)).await, []);
    let untouched = get(&store, &id(4)).await;
    assert_eq!((untouched.attempts, untouched.uncharged), (0, 0));
    assert_eq!(
        store.recover(5_000).await.expect("recover"),
        Reclaimed::default()
    );
    assert_eq!(claim(&store, 10).await.len(), 4);
}

pub async fn renew_and_reclaim_takes_only_lapsed_leases(store: Store) {
    for n in 1..=4 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    // Leases that have run out: 1 and 2 (started), 3 (reserved); 2 is still running here.
    let lapsed = store
        .claim_due(2, unlimited(), -1)
        .await
        .expect("claim")
        .claimed;
    assert_eq!(claimed_ids(&lapsed), [id(1), id(2)]);
    let reserved = store
        .reserve_next(ORIGIN_A.to_owned(), -1)
        .await
        .expect("reserve")
        .expect("reserved");
    assert_eq!(reserved.id, id(3));
    let running = claim(&store, 1).await;
    assert_eq!(claimed_ids(&running), [id(4)]);

    let live = vec![(id(2), lapsed[1].claim_seq)];
    let before = store.now_ms();
    assert_eq!(
        store
            .renew_and_reclaim(live, 120_000, 5_000)
            .await
            .expect("renew and reclaim"),
        Reclaimed {
            interrupted: 1,
            released: 1,
            unknown: 0,
        }
    );
    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Pending);
    assert_eq!((d.attempts, d.uncharged), (1, 1));
    assert_eq!(
        attempts(&store, &id(1)).await[0].error_code.as_deref(),
        Some("lease_expired")
    );
    // Renewed, not taken: its attempt is running.
    let d = get(&store, &id(2)).await;
    assert_eq!(d.status, DeliveryStatus::InFlight);
    assert!(d.lease_until.is_some_and(|l| l >= before + 120_000));
    assert_eq!(attempts(&store, &id(2)).await[0].outcome, None);
    let d = get(&store, &id(3)).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Pending, 0));
    // A lease that still runs is left as it was.
    let d = get(&store, &id(4)).await;
    assert_eq!(d.status, DeliveryStatus::InFlight);
    assert_eq!(d.lease_until, Some(running[0].lease_until));
}

// ---------------------------------------------------------------------------------------------
// listing, scheduling and numbers

pub async fn list_paginates_every_row_once(store: Store) {
    // Inserted out of id order; listings are in id order.
    for n in (1..=25).rev() {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list(None, 10, cursor).await.expect("list");
        sizes.push(page.deliveries.len());
        for d in &page.deliveries {
            assert_eq!(d.headers, None, "listings carry no headers");
            assert_eq!(d.body, None, "listings carry no body");
            assert_eq!(d.status, DeliveryStatus::Pending);
            assert_eq!(d.target_url, URL_A);
        }
        seen.extend(page.deliveries.into_iter().map(|d| d.id));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
        assert!(sizes.len() < 10, "pagination does not end");
    }
    assert_eq!(sizes, [10, 10, 5]);
    assert_eq!(seen, (1..=25).map(id).collect::<Vec<_>>());

    // An exact multiple of the page size ends without an empty extra page.
    let first = store.list(None, 25, None).await.expect("list");
    assert_eq!(first.deliveries.len(), 25);
    assert_eq!(first.next_cursor, None);
}

pub async fn list_filters_by_target_and_time_in_either_order(store: Store) {
    for n in 1..=12 {
        let url = if n % 3 == 0 { URL_B } else { URL_A };
        create(&store, new_delivery(&id(n), None, url)).await;
    }
    // Every page of a filtered listing, its cursor passed back.
    let all = |filter: spool_store::model::ListFilter| {
        let store = store.clone();
        async move {
            let (mut seen, mut cursor) = (Vec::new(), None);
            loop {
                let page = store
                    .list_filtered(filter.clone(), 3, cursor)
                    .await
                    .expect("list");
                seen.extend(page.deliveries.into_iter().map(|d| d.id));
                cursor = page.next_cursor;
                if cursor.is_none() {
                    return seen;
                }
            }
        }
    };
    let ids = |ns: &[u32]| ns.iter().map(|n| id(*n)).collect::<Vec<_>>();
    let b = spool_store::model::ListFilter {
        origin: Some(ORIGIN_B.into()),
        ..Default::default()
    };
    assert_eq!(all(b.clone()).await, ids(&[3, 6, 9, 12]));
    let newest_b = spool_store::model::ListFilter {
        newest_first: true,
        ..b
    };
    assert_eq!(all(newest_b).await, ids(&[12, 9, 6, 3]));
    let newest = spool_store::model::ListFilter {
        newest_first: true,
        ..Default::default()
    };
    let mut everything = ids(&(1..=12).collect::<Vec<_>>());
    everything.reverse();
    assert_eq!(all(newest).await, everything);
    // Created since: all of them (they were just made), none in the future.
    let created = get(&store, &id(1)).await.created_at;
    let since = |at| spool_store::model::ListFilter {
        created_after: Some(at),
        status: Some(DeliveryStatus::Pending),
        ..Default::default()
    };
    assert_eq!(all(since(created)).await.len(), 12);
    assert!(all(since(created + 86_400_000)).await.is_empty());
    // Created before: none before the first, all before tomorrow.
    let before = |at| spool_store::model::ListFilter {
        created_before: Some(at),
        ..Default::default()
    };
    assert!(all(before(created)).await.is_empty());
    assert_eq!(all(before(created + 86_400_000)).await.len(), 12);
    // By the code of the last attempt's error.
    let first = claim(&store, 1).await.remove(0);
    let failed = AttemptResult {
        disposition: Disposition::Failed,
        http_status: Some(404),
        error_code: Some("http_status".to_owned()),
        error: Some("HTTP 404".to_owned()),
        ..succeeded(&first)
    };
    store.complete(failed).await.expect("complete");
    let code = |code: &str| spool_store::model::ListFilter {
        last_error_code: Some(code.to_owned()),
        ..Default::default()
    };
    assert_eq!(all(code("http_status")).await, [first.id]);
    assert!(all(code("timeout")).await.is_empty());
}

pub async fn list_filters_by_status(store: Store) {
    for n in 1..=25 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    for n in [3, 7, 11, 19, 23] {
        store.cancel(id(n)).await.expect("cancel");
    }
    let canceled = store
        .list(Some(DeliveryStatus::Canceled), 10, None)
        .await
        .expect("list");
    let canceled_ids: Vec<String> = canceled.deliveries.iter().map(|d| d.id.clone()).collect();
    assert_eq!(canceled_ids, [id(3), id(7), id(11), id(19), id(23)]);
    assert_eq!(canceled.next_cursor, None);

    let mut pending = Vec::new();
    let mut sizes = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(Some(DeliveryStatus::Pending), 10, cursor)
            .await
            .expect("list");
        assert!(page
            .deliveries
            .iter()
            .all(|d| d.status == DeliveryStatus::Pending));
        sizes.push(page.deliveries.len());
        pending.extend(page.deliveries.into_iter().map(|d| d.id));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
        assert!(sizes.len() < 10, "pagination does not end");
    }
    assert_eq!(
        sizes,
        [10, 10],
        "20 pending rows: two full pages, no empty third"
    );
    let expected: Vec<String> = (1..=25)
        .filter(|n| ![3, 7, 11, 19, 23].contains(n))
        .map(id)
        .collect();
    assert_eq!(pending, expected);

    let none = store
        .list(Some(DeliveryStatus::Failed), 10, None)
        .await
        .expect("list");
    assert!(none.deliveries.is_empty());
    assert_eq!(none.next_cursor, None);
}

/// Counts by status and by origin are kept by the store, not counted on demand: after every
/// kind of change they must still equal what the listings show.
pub async fn counts_follow_every_change(store: Store) {
    async fn check(store: &Store, step: &str) {
        let mut listed: HashMap<DeliveryStatus, u64> = HashMap::new();
        let mut by_origin: HashMap<String, (u64, u64)> = HashMap::new();
        let mut cursor = None;
        loop {
            let page = store.list(None, 500, cursor).await.expect("list");
            for d in &page.deliveries {
                *listed.entry(d.status).or_default() += 1;
                let row = by_origin.entry(d.origin.clone()).or_default();
                match d.status {
                    DeliveryStatus::Pending => row.0 += 1,
                    DeliveryStatus::InFlight => row.1 += 1,
                    _ => {}
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let stats = store.stats().await.expect("stats");
        assert_eq!(
            status_counts(&stats.by_status),
            listed,
            "by status, after {step}"
        );
        by_origin.retain(|_, (pending, in_flight)| *pending + *in_flight > 0);
        let origins: HashMap<String, (u64, u64)> = store
            .origins(100, None)
            .await
            .expect("origins")
            .into_iter()
            .map(|o| (o.origin, (o.pending, o.in_flight)))
            .collect();
        assert_eq!(origins, by_origin, "by origin, after {step}");
    }
    check(&store, "nothing").await;
    for n in 1..=6 {
        let url = if n % 2 == 0 { URL_B } else { URL_A };
        create(&store, new_delivery(&id(n), None, url)).await;
    }
    check(&store, "creates").await;
    let claimed = claim(&store, 4).await;
    check(&store, "claims").await;
    complete(&store, &claimed[0], Disposition::Succeeded, Some(200)).await;
    complete(&store, &claimed[1], Disposition::Failed, Some(400)).await;
    complete(
        &store,
        &claimed[2],
        Disposition::Retry { delay_ms: 0 },
        Some(503),
    )
    .await;
    check(&store, "results").await;
    store.cancel(claimed[3].id.clone()).await.expect("cancel");
    store.cancel(id(5)).await.expect("cancel");
    check(&store, "cancels").await;
    store.retry(claimed[1].id.clone()).await.expect("retry");
    check(&store, "an operator's retry").await;
    let reserved = reserve(&store, ORIGIN_A).await;
    check(&store, "a reservation").await;
    if let Some(r) = reserved {
        store.release(r.id, r.claim_seq).await.expect("release");
    }
    claim(&store, 1).await;
    assert_eq!(store.recover(5_000).await.expect("recover").total(), 1);
    check(&store, "recovery").await;

    // A slot's steps taken as one: record a result, start the next, reserve the one after.
    for n in 9..=11 {
        create(&store, new_delivery(&id(n), None, URL_A)).await;
    }
    let first = reserve(&store, ORIGIN_A).await.expect("due work on A");
    let running = match store.start(first, 60_000).await.expect("start") {
        StartOutcome::Started(c) => c,
        other => panic!("expected Started, got {other:?}"),
    };
    let next = reserve(&store, ORIGIN_A).await.expect("more due work on A");
    let advanced = store
        .advance(Some(succeeded(&running)), next, true, 60_000)
        .await;
    advanced.applied.expect("a result").expect("recorded");
    advanced.started.expect("started");
    let reserved = advanced.reserved.expect("reserved");
    check(&store, "a slot's steps").await;
    // An attempt started ahead and never sent, undone.
    let ahead = store
        .advance(None, reserved.expect("one more due on A"), true, 60_000)
        .await;
    match ahead.started.expect("start") {
        StartOutcome::Started(c) => {
            assert!(store.unstart(c.id, c.claim_seq).await.expect("unstart"))
        }
        other => panic!("expected Started, got {other:?}"),
    }
    check(&store, "an attempt undone").await;

    // Deadlines met by a start and by a reservation.
    let url_c = "http://127.0.0.3:8080/hooks/c";
    let now = store.now_ms();
    for n in 7..=8 {
        let mut soon = new_delivery(&id(n), None, url_c);
        soon.expires_at = Some(now + SOON);
        create(&store, soon).await;
    }
    let held = reserve(&store, &origin_of(url_c)).await.expect("reserved");
    wait_until(&store, now + SOON + 1).await;
    assert!(matches!(
        store.start(held, 60_000).await.expect("start"),
        StartOutcome::Expired
    ));
    assert!(reserve(&store, &origin_of(url_c)).await.is_none());
    check(&store, "deadlines met by a start and a reservation").await;

    let now = store.now_ms();
    wait_until(&store, now + 2).await;
    store.purge_finished(0, 100).await.expect("purge");
    check(&store, "retention").await;
}

/// `(from, to, attempt, reason)` of every entry in the delivery's transition log.
async fn log_of(store: &Store, id: &str) -> Vec<(Option<&'static str>, &'static str, u32, String)> {
    let log = store
        .transitions(id.to_owned())
        .await
        .expect("transitions")
        .expect("a known delivery");
    let d = get(store, id).await;
    // A chain: each entry starts where the last one ended, and the last ends where the delivery is.
    for pair in log.windows(2) {
        assert_eq!(pair[1].from, Some(pair[0].to), "{log:?}");
        assert!(pair[1].at >= pair[0].at, "{log:?}");
    }
    assert_eq!(log.last().map(|t| t.to), Some(d.status), "{log:?}");
    log.into_iter()
        .map(|t| {
            (
                t.from.map(DeliveryStatus::as_str),
                t.to.as_str(),
                t.attempt,
                t.reason,
            )
        })
        .collect()
}

pub async fn transition_log_follows_every_change(store: Store) {
    let s = |v: &[(Option<&'static str>, &'static str, u32, &str)]| {
        v.iter()
            .map(|(f, t, a, r)| (*f, *t, *a, (*r).to_owned()))
            .collect::<Vec<_>>()
    };
    // Retried, interrupted by a restart, then delivered.
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let first = claim(&store, 1).await.remove(0);
    complete(
        &store,
        &first,
        Disposition::Retry { delay_ms: 0 },
        Some(503),
    )
    .await;
    claim(&store, 1).await;
    store.recover(5_000).await.expect("recover");
    let last = claim(&store, 1).await.remove(0);
    complete(&store, &last, Disposition::Succeeded, Some(200)).await;
    assert_eq!(
        log_of(&store, &id(1)).await,
        s(&[
            (None, "pending", 0, "created"),
            (Some("pending"), "in_flight", 1, "claimed"),
            (Some("in_flight"), "pending", 1, "http_status"),
            (Some("pending"), "in_flight", 2, "claimed"),
            (Some("in_flight"), "pending", 2, "daemon_restart"),
            (Some("pending"), "in_flight", 3, "claimed"),
            (Some("in_flight"), "succeeded", 3, "delivered"),
        ])
    );

    // Reserved and released, reserved and canceled; failed and retried by an operator.
    create(&store, new_delivery(&id(2), None, URL_A)).await;
    let r = reserve(&store, ORIGIN_A).await.expect("reserved");
    store.release(r.id, r.claim_seq).await.expect("release");
    reserve(&store, ORIGIN_A).await.expect("reserved");
    store.cancel(id(2)).await.expect("cancel");
    assert_eq!(
        log_of(&store, &id(2)).await,
        s(&[
            (None, "pending", 0, "created"),
            (Some("pending"), "in_flight", 0, "reserved"),
            (Some("in_flight"), "pending", 0, "released"),
            (Some("pending"), "in_flight", 0, "reserved"),
            (Some("in_flight"), "canceled", 0, "canceled"),
        ])
    );
    let mut once = new_delivery(&id(3), None, URL_B);
    once.max_attempts = 1;
    create(&store, once).await;
    let only = claim(&store, 1).await.remove(0);
    complete(&store, &only, Disposition::Retry { delay_ms: 0 }, Some(500)).await;
    store.retry(id(3)).await.expect("retry");
    let log = store.transitions(id(3)).await.expect("log").expect("known");
    assert_eq!(log[2].note.as_deref(), Some("no attempts left"), "{log:?}");
    assert_eq!(
        log_of(&store, &id(3)).await,
        s(&[
            (None, "pending", 0, "created"),
            (Some("pending"), "in_flight", 1, "claimed"),
            (Some("in_flight"), "failed", 1, "http_status"),
            (Some("failed"), "pending", 0, "retried"),
        ])
    );

    // Expired while waiting.
    let now = store.now_ms();
    let mut soon = new_delivery(&id(4), None, URL_B);
    soon.expires_at = Some(now + SOON);
    soon.not_before = Some(now + 20);
    create(&store, soon).await;
    wait_until(&store, now + SOON + 1).await;
    store.expire_overdue(10).await.expect("expire");
    assert_eq!(
        log_of(&store, &id(4)).await,
        s(&[
            (None, "pending", 0, "created"),
            (Some("pending"), "failed", 0, "expired"),
        ])
    );
    assert_eq!(store.transitions(id(99)).await.expect("log"), None);
}

pub async fn next_due_and_stats(store: Store) {
    assert_eq!(store.next_due(Vec::new()).await.expect("next_due"), None);
    let empty = store.stats().await.expect("stats");
    assert_eq!(status_counts(&empty.by_status), HashMap::new());
    assert_eq!(empty.oldest_due_at, None);

    let now = store.now_ms();
    let due_now = create(&store, new_delivery(&id(1), None, URL_A)).await;
    let mut later = new_delivery(&id(2), None, URL_B);
    later.not_before = Some(now + 60_000);
    create(&store, later).await;
    let due_at = due_now.next_attempt_at.expect("due");

    let next_due = |saturated: &[&str]| {
        let store = store.clone();
        let saturated: Vec<String> = saturated.iter().map(|s| (*s).to_owned()).collect();
        async move { store.next_due(saturated).await.expect("next_due") }
    };
    assert_eq!(next_due(&[]).await, Some(due_at));
    assert_eq!(next_due(&[ORIGIN_B]).await, Some(due_at));
    assert_eq!(next_due(&[ORIGIN_A]).await, Some(now + 60_000));
    assert_eq!(next_due(&[ORIGIN_A, ORIGIN_B]).await, None);

    let stats = store.stats().await.expect("stats");
    assert_eq!(
        status_counts(&stats.by_status),
        HashMap::from([(DeliveryStatus::Pending, 2)])
    );
    assert_eq!(
        stats.oldest_due_at,
        Some(due_at),
        "only work already due counts"
    );
    assert!(stats.db_bytes > 0);

    let claimed = claim(&store, 10).await;
    assert_eq!(claimed_ids(&claimed), [id(1)]);
    assert_eq!(
        next_due(&[]).await,
        Some(now + 60_000),
        "in flight is not due"
    );
    let stats = store.stats().await.expect("stats");
    assert_eq!(
        status_counts(&stats.by_status),
        HashMap::from([(DeliveryStatus::Pending, 1), (DeliveryStatus::InFlight, 1)])
    );
    assert_eq!(stats.oldest_due_at, None);

    complete(&store, &claimed[0], Disposition::Succeeded, Some(200)).await;
    store.cancel(id(2)).await.expect("cancel");
    let stats = store.stats().await.expect("stats");
    assert_eq!(
        status_counts(&stats.by_status),
        HashMap::from([
            (DeliveryStatus::Succeeded, 1),
            (DeliveryStatus::Canceled, 1)
        ])
    );
    assert_eq!(next_due(&[]).await, None);
}

/// What a target, a reconciliation or a person wrote is recorded whatever it holds, and both
/// backends give back the same text: PostgreSQL's `text` cannot hold a NUL, so the store keeps
/// one as U+FFFD (SQLite would keep it as it is). Before that, a NUL in the start of a target's
/// answer (kept in the attempt's error) failed the record on PostgreSQL and left the delivery
/// `in_flight` until its lease ran out, to be sent again.
pub async fn text_from_outside_is_kept_whatever_it_holds(store: Store) {
    let given = || "HTTP 500: a\0b".to_owned();
    let kept = "HTTP 500: a\u{FFFD}b".to_owned();

    // An attempt's error (the start of the target's answer), then the target's id.
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    let claimed = claim(&store, 1).await.remove(0);
    let applied = store
        .complete(AttemptResult {
            disposition: Disposition::Retry { delay_ms: 0 },
            http_status: Some(500),
            error_code: Some("http_status".into()),
            error: Some(given()),
            ..succeeded(&claimed)
        })
        .await
        .expect("an attempt is recorded whatever its text");
    assert_eq!(applied, Applied::Now(DeliveryStatus::Pending));
    assert_eq!(
        get(&store, &id(1)).await.last_error.as_deref(),
        Some(&*kept)
    );
    let claimed = claim(&store, 1).await.remove(0);
    let applied = store
        .complete(AttemptResult {
            remote_id: Some(given()),
            ..succeeded(&claimed)
        })
        .await
        .expect("an attempt is recorded whatever its text");
    assert_eq!(applied, Applied::Now(DeliveryStatus::Succeeded));
    assert_eq!(get(&store, &id(1)).await.remote_id.as_deref(), Some(&*kept));
    assert_eq!(
        attempts(&store, &id(1)).await[0].error.as_deref(),
        Some(&*kept)
    );

    // A reconciliation's check and verdict, and a person's note.
    make_unknown(&store, at_most_once(&id(2))).await;
    store
        .record_check(CheckResult {
            id: id(2),
            check: Some(Check {
                error: Some(given()),
                ..check_row(None)
            }),
            verdict: CheckVerdict::ManualReview {
                reason: "multiple_matches".into(),
                note: Some(given()),
            },
        })
        .await
        .expect("a check is recorded whatever its text");
    let outcome = store
        .resolve(
            id(2),
            Resolution::Succeeded {
                remote_id: Some(given()),
            },
            given(),
        )
        .await
        .expect("a resolution is recorded whatever its note");
    assert!(matches!(outcome, TransitionOutcome::Done(_)), "{outcome:?}");
    let checks = store.checks(id(2)).await.expect("checks").expect("known");
    assert_eq!(checks[0].error.as_deref(), Some(&*kept));
    let log = store.transitions(id(2)).await.expect("log").expect("known");
    let notes: Vec<&str> = log.iter().filter_map(|t| t.note.as_deref()).collect();
    assert_eq!(notes[notes.len() - 2..], [&*kept, &*kept], "{log:?}");
    assert_eq!(get(&store, &id(2)).await.remote_id.as_deref(), Some(&*kept));

    // A record imported with such text in its history.
    let mut record = store.export(id(1)).await.expect("export").expect("record");
    record.delivery.id = id(3);
    record.delivery.last_error = Some(given());
    record.attempts[0].error = Some(given());
    if let Some(first) = record.transitions.first_mut() {
        first.note = Some(given());
    }
    assert_eq!(
        store
            .import(record)
            .await
            .expect("imported whatever its text"),
        ImportOutcome::Imported
    );
    let copy = store.export(id(3)).await.expect("export").expect("copy");
    assert_eq!(
        (
            copy.delivery.last_error.as_deref(),
            copy.attempts[0].error.as_deref(),
            copy.transitions[0].note.as_deref()
        ),
        (Some(&*kept), Some(&*kept), Some(&*kept))
    );
}

pub async fn ping_writes(store: Store) {
    store.ping().await.expect("ping");
    store.ping().await.expect("ping twice");
    assert_eq!(store.write_failures(), 0);
}

// ---------------------------------------------------------------------------------------------
// small steps shared by the tests above

/// An at-most-once delivery with a one-minute observation window.
fn at_most_once(id: &str) -> NewDelivery {
    NewDelivery {
        mode: Mode::AtMostOnce,
        fingerprint: Some(format!("order-{id}")),
        reconcile: Some(r#"{"url":"http://127.0.0.1:8080/search?f={fingerprint}"}"#.into()),
        observation_window_ms: Some(60_000),
        ..new_delivery(id, None, URL_A)
    }
}

/// Claim one delivery and record its outcome as unknown, first check due at once.
async fn make_unknown(store: &Store, new: NewDelivery) -> Delivery {
    let id = new.id.clone();
    create(store, new).await;
    let claimed = claim(store, 1).await.remove(0);
    assert_eq!(claimed.id, id);
    assert_eq!(claimed.mode, Mode::AtMostOnce);
    complete(
        store,
        &claimed,
        Disposition::Unknown { check_in_ms: 0 },
        Some(502),
    )
    .await;
    get(store, &id).await
}

fn check_row(matches: Option<u32>) -> Check {
    Check {
        at: 1,
        http_status: Some(200),
        matches,
        error_code: None,
        error: None,
        duration_ms: 3,
    }
}

async fn insert(store: &Store, new: NewDelivery) -> InsertOutcome {
    store.insert(new).await.expect("insert")
}

pub async fn create(store: &Store, new: NewDelivery) -> Delivery {
    match insert(store, new).await {
        InsertOutcome::Created(d) => d,
        other => panic!("expected Created, got {other:?}"),
    }
}

async fn get(store: &Store, id: &str) -> Delivery {
    store
        .get(id.to_owned())
        .await
        .expect("get")
        .expect("delivery exists")
}

async fn attempts(store: &Store, id: &str) -> Vec<Attempt> {
    store
        .attempts(id.to_owned())
        .await
        .expect("attempts")
        .expect("delivery exists")
}

fn unlimited() -> Capacity {
    Capacity {
        per_origin: u32::MAX,
        in_flight: HashMap::new(),
        limits: HashMap::new(),
    }
}

/// Claim up to `limit` deliveries with no capacity limit and a one-minute lease.
async fn claim(store: &Store, limit: u32) -> Vec<Claimed> {
    let batch = store
        .claim_due(limit, unlimited(), 60_000)
        .await
        .expect("claim");
    assert_eq!(batch.expired, 0);
    batch.claimed
}

async fn complete(
    store: &Store,
    claimed: &Claimed,
    disposition: Disposition,
    http_status: Option<u16>,
) -> Applied {
    store
        .complete(AttemptResult {
            id: claimed.id.clone(),
            claim_seq: claimed.claim_seq,
            disposition,
            http_status,
            // As the daemon reports an answer that is not a success.
            error_code: http_status
                .filter(|s| !(200..300).contains(s))
                .map(|_| "http_status".to_owned()),
            error: None,
            duration_ms: 1,
            remote_id: None,
        })
        .await
        .expect("complete")
}

/// A 200 for `claimed`'s attempt, as the daemon reports it.
pub fn succeeded(claimed: &Claimed) -> AttemptResult {
    AttemptResult {
        id: claimed.id.clone(),
        claim_seq: claimed.claim_seq,
        disposition: Disposition::Succeeded,
        http_status: Some(200),
        error_code: None,
        error: None,
        duration_ms: 1,
        remote_id: None,
    }
}

async fn list_ids(store: &Store, status: Option<DeliveryStatus>) -> Vec<String> {
    let page = store.list(status, 1000, None).await.expect("list");
    assert_eq!(page.next_cursor, None);
    page.deliveries.into_iter().map(|d| d.id).collect()
}

async fn count_status(store: &Store, status: DeliveryStatus) -> usize {
    list_ids(store, Some(status)).await.len()
}

/// Reserve `origin`'s next due delivery with a long lease.
async fn reserve(store: &Store, origin: &str) -> Option<Reservation> {
    store
        .reserve_next(origin.to_owned(), 60_000)
        .await
        .expect("reserve")
}

fn claimed_ids(claimed: &[Claimed]) -> Vec<String> {
    claimed.iter().map(|c| c.id.clone()).collect()
}

/// Claimed deliveries per origin, sorted by origin.
fn origin_counts(claimed: &[Claimed]) -> Vec<(&str, usize)> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for c in claimed {
        match counts.iter_mut().find(|(o, _)| *o == c.origin) {
            Some((_, n)) => *n += 1,
            None => counts.push((&c.origin, 1)),
        }
    }
    counts.sort();
    counts
}

fn status_counts(by_status: &[(DeliveryStatus, u64)]) -> HashMap<DeliveryStatus, u64> {
    by_status
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|&(s, n)| (s, n))
        .collect()
}

pub async fn at_most_once_unknown_is_never_claimed_and_settled_by_checks(store: Store) {
    let before = store.now_ms();
    let d = make_unknown(&store, at_most_once(&id(1))).await;
    assert_eq!(d.status, DeliveryStatus::Unknown);
    assert_eq!(
        (d.mode, d.fingerprint.as_deref()),
        (
            Mode::AtMostOnce,
            Some("order-00000000000000000000000000000001")
        )
    );
    let since = d.unknown_since.expect("unknown since");
    assert!(since >= before);
    assert_eq!(d.review_at, Some(since + 60_000));
    assert_eq!(d.check_at, Some(since));
    assert_eq!((d.next_attempt_at, d.lease_until), (None, None));
    assert_eq!(
        attempts(&store, &id(1)).await[0].outcome.as_deref(),
        Some("unknown")
    );
    // Never claimed or reserved again by itself.
    assert!(claim(&store, 10).await.is_empty());
    assert_eq!(reserve(&store, ORIGIN_A).await, None);

    let due = store.due_checks(10).await.expect("due checks");
    assert_eq!(
        due.iter().map(|d| d.id.clone()).collect::<Vec<_>>(),
        [id(1)]
    );
    assert!(due[0].reconcile.is_some());
    // No match yet: asked again later, the check kept.
    let later = store.now_ms() + 600_000;
    let applied = store
        .record_check(CheckResult {
            id: id(1),
            check: Some(check_row(Some(0))),
            verdict: CheckVerdict::AskAgain { at: later },
        })
        .await
        .expect("record check");
    assert_eq!(applied, Applied::Now(DeliveryStatus::Unknown));
    assert!(store.due_checks(10).await.expect("due").is_empty());
    assert_eq!(store.next_check().await.expect("next check"), Some(later));
    let d = get(&store, &id(1)).await;
    assert_eq!((d.checks, d.check_at), (1, Some(later)));

    // One match: succeeded, with the remote id.
    let applied = store
        .record_check(CheckResult {
            id: id(1),
            check: Some(check_row(Some(1))),
            verdict: CheckVerdict::Succeeded {
                remote_id: Some("rec-9".into()),
            },
        })
        .await
        .expect("record check");
    assert_eq!(applied, Applied::Now(DeliveryStatus::Succeeded));
    let d = get(&store, &id(1)).await;
    assert_eq!(
        (d.status, d.remote_id.as_deref(), d.checks),
        (DeliveryStatus::Succeeded, Some("rec-9"), 2)
    );
    assert_eq!(store.next_check().await.expect("next check"), None);
    let checks = store.checks(id(1)).await.expect("checks").expect("known");
    assert_eq!(
        checks.iter().map(|c| c.matches).collect::<Vec<_>>(),
        [Some(0), Some(1)]
    );
    let log = log_of(&store, &id(1)).await;
    assert_eq!(
        log[log.len() - 2..]
            .iter()
            .map(|(f, t, _, r)| (*f, *t, r.as_str()))
            .collect::<Vec<_>>(),
        [
            (Some("in_flight"), "unknown", "http_status"),
            (Some("unknown"), "succeeded", "reconciled"),
        ]
    );
    assert_eq!(store.checks(id(99)).await.expect("checks"), None);
}

pub async fn at_most_once_checks_are_fenced_by_status(store: Store) {
    make_unknown(&store, at_most_once(&id(1))).await;
    let review = CheckResult {
        id: id(1),
        check: Some(check_row(Some(2))),
        verdict: CheckVerdict::ManualReview {
            reason: "multiple_matches".into(),
            note: Some("2 matches".into()),
        },
    };
    assert_eq!(
        store.record_check(review.clone()).await.expect("record"),
        Applied::Now(DeliveryStatus::ManualReview)
    );
    // Once out of `unknown`, a late verdict changes nothing; its check is still kept.
    assert_eq!(
        store.record_check(review).await.expect("record"),
        Applied::Fenced
    );
    let d = get(&store, &id(1)).await;
    assert_eq!((d.status, d.checks), (DeliveryStatus::ManualReview, 2));
    assert!(store.due_checks(10).await.expect("due").is_empty());
    // Retention never purges deliveries waiting for a person.
    assert_eq!(
        store.purge_finished(-1_000_000, 100).await.expect("purge"),
        0
    );
    assert_eq!(
        store
            .record_check(CheckResult {
                id: id(7),
                check: None,
                verdict: CheckVerdict::AskAgain { at: 0 }
            })
            .await
            .expect("record"),
        Applied::Fenced
    );
}

pub async fn recover_makes_started_at_most_once_unknown(store: Store) {
    create(&store, at_most_once(&id(1))).await;
    let started = claim(&store, 1).await;
    assert_eq!(started.len(), 1);
    create(&store, at_most_once(&id(2))).await;
    let reserved = reserve(&store, ORIGIN_A).await.expect("reserved");
    assert_eq!(reserved.id, id(2));
    assert_eq!(
        store.recover(5_000).await.expect("recover"),
        Reclaimed {
            interrupted: 0,
            released: 1,
            unknown: 1,
        }
    );
    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Unknown);
    assert_eq!(d.check_at, d.unknown_since.map(|t| t + 5_000));
    assert_eq!(d.last_error_code.as_deref(), Some("daemon_restart"));
    // The reservation never sent anything: safe to send.
    assert_eq!(get(&store, &id(2)).await.status, DeliveryStatus::Pending);
    assert_eq!(claimed_ids(&claim(&store, 10).await), [id(2)]);
}

pub async fn resolve_transitions(store: Store) {
    let note = || "checked with the vendor".to_owned();
    create(&store, new_delivery(&id(1), None, URL_A)).await;
    assert_eq!(
        store
            .resolve(id(1), Resolution::Failed, note())
            .await
            .expect("resolve"),
        TransitionOutcome::Invalid(DeliveryStatus::Pending)
    );
    assert_eq!(
        store
            .resolve(id(9), Resolution::Failed, note())
            .await
            .expect("resolve"),
        TransitionOutcome::NotFound
    );
    store.cancel(id(1)).await.expect("cancel");
    // unknown → resend: a new cycle, due at once.
    make_unknown(&store, at_most_once(&id(2))).await;
    let TransitionOutcome::Done(d) = store
        .resolve(id(2), Resolution::Resend, note())
        .await
        .expect("resolve")
    else {
        panic!("resend refused");
    };
    assert_eq!(
        (d.status, d.cycle, d.attempts),
        (DeliveryStatus::Pending, 2, 0)
    );
    assert_eq!(
        (d.unknown_since, d.check_at, d.review_at),
        (None, None, None)
    );
    let log = log_of(&store, &id(2)).await;
    assert_eq!(
        log.last().map(|(f, t, _, r)| (*f, *t, r.as_str())),
        Some((Some("unknown"), "pending", "resend"))
    );
    let notes = store.transitions(id(2)).await.expect("log").expect("known");
    assert_eq!(
        notes.last().and_then(|t| t.note.as_deref()),
        Some("checked with the vendor")
    );
    assert_eq!(claimed_ids(&claim(&store, 10).await), [id(2)]);

    // manual_review → failed, and unknown → succeeded with a remote id.
    make_unknown(&store, at_most_once(&id(3))).await;
    store
        .record_check(CheckResult {
            id: id(3),
            check: None,
            verdict: CheckVerdict::ManualReview {
                reason: "no_reconcile_configured".into(),
                note: None,
            },
        })
        .await
        .expect("record");
    let done = store
        .resolve(id(3), Resolution::Failed, note())
        .await
        .expect("resolve");
    assert!(matches!(done, TransitionOutcome::Done(ref d) if d.status == DeliveryStatus::Failed));
    make_unknown(&store, at_most_once(&id(4))).await;
    let done = store
        .resolve(
            id(4),
            Resolution::Succeeded {
                remote_id: Some("r-4".into()),
            },
            note(),
        )
        .await
        .expect("resolve");
    assert!(matches!(done, TransitionOutcome::Done(ref d)
        if d.status == DeliveryStatus::Succeeded && d.remote_id.as_deref() == Some("r-4")));
    // Settled: no second decision.
    assert_eq!(
        store
            .resolve(id(4), Resolution::Resend, note())
            .await
            .expect("resolve"),
        TransitionOutcome::Invalid(DeliveryStatus::Succeeded)
    );
}

pub async fn cancel_of_at_most_once_in_flight_is_refused(store: Store) {
    create(&store, at_most_once(&id(1))).await;
    claim(&store, 1).await;
    assert_eq!(
        store.cancel(id(1)).await.expect("cancel"),
        TransitionOutcome::InvalidForMode(DeliveryStatus::InFlight)
    );
    // Pending is safe to cancel: nothing has left.
    create(&store, at_most_once(&id(2))).await;
    assert!(matches!(
        store.cancel(id(2)).await.expect("cancel"),
        TransitionOutcome::Done(ref d) if d.status == DeliveryStatus::Canceled
    ));
}

pub async fn retry_of_at_most_once_that_may_have_arrived_is_refused(store: Store) {
    let note = || "must not be sent".to_owned();
    make_unknown(&store, at_most_once(&id(1))).await;
    let done = store
        .resolve(id(1), Resolution::Failed, note())
        .await
        .expect("resolve");
    assert!(matches!(done, TransitionOutcome::Done(ref d) if d.status == DeliveryStatus::Failed));
    assert_eq!(
        store.retry(id(1)).await.expect("retry"),
        TransitionOutcome::InvalidForMode(DeliveryStatus::Failed)
    );
    assert_eq!(get(&store, &id(1)).await.status, DeliveryStatus::Failed);
    // Only a person's resend sends it again: a new cycle, the unknown past cleared.
    let done = store
        .resolve(id(1), Resolution::Resend, note())
        .await
        .expect("resolve");
    assert!(matches!(done, TransitionOutcome::Done(ref d)
        if d.status == DeliveryStatus::Pending && d.cycle == 2 && d.unknown_since.is_none()));
    // A failure on the target's final answer (a 400): the request arrived, so the same — retry
    // refuses it, resolve applies.
    create(&store, at_most_once(&id(2))).await;
    let claimed = claim(&store, 10).await;
    let claimed = claimed.iter().find(|c| c.id == id(2)).expect("claimed");
    complete(&store, claimed, Disposition::Failed, Some(400)).await;
    assert_eq!(
        store.retry(id(2)).await.expect("retry"),
        TransitionOutcome::InvalidForMode(DeliveryStatus::Failed)
    );
    assert!(matches!(
        store.resolve(id(2), Resolution::Resend, note()).await.expect("resolve"),
        TransitionOutcome::Done(ref d) if d.status == DeliveryStatus::Pending && d.cycle == 2
    ));
    // Failures where nothing arrived are retried as any other, and resolve does not apply to
    // them: nothing was written (a refused connection), or the target said it did not take
    // the request until the attempts ran out (429, a 503 it asked to come back after).
    for (n, status, code) in [
        (3, None, "connect_failed"),
        (4, Some(429), "http_status"),
        (5, Some(503), "http_status"),
    ] {
        // One attempt allowed: the retry below runs it out.
        let one = NewDelivery {
            max_attempts: 1,
            ..at_most_once(&id(n))
        };
        create(&store, one).await;
        let claimed = claim(&store, 10).await;
        let claimed = claimed.iter().find(|c| c.id == id(n)).expect("claimed");
        store
            .complete(AttemptResult {
                id: claimed.id.clone(),
                claim_seq: claimed.claim_seq,
                disposition: Disposition::Retry { delay_ms: 0 },
                http_status: status,
                error_code: Some(code.to_owned()),
                error: None,
                duration_ms: 1,
                remote_id: None,
            })
            .await
            .expect("complete");
        assert_eq!(
            get(&store, &id(n)).await.status,
            DeliveryStatus::Failed,
            "{code}"
        );
        assert_eq!(
            store
                .resolve(id(n), Resolution::Resend, note())
                .await
                .expect("resolve"),
            TransitionOutcome::Invalid(DeliveryStatus::Failed),
            "{code} {status:?}"
        );
        assert!(
            matches!(
                store.retry(id(n)).await.expect("retry"),
                TransitionOutcome::Done(ref d) if d.status == DeliveryStatus::Pending
            ),
            "{code} {status:?}"
        );
    }
}

pub async fn a_late_success_settles_the_unknown_its_attempt_left(store: Store) {
    for n in 1..=3 {
        create(&store, at_most_once(&id(n))).await;
    }
    // Leases that ran out at once; nothing is live: all three are taken back, `unknown`.
    let lapsed = store
        .claim_due(3, unlimited(), -1)
        .await
        .expect("claim")
        .claimed;
    assert_eq!(lapsed.len(), 3);
    let taken = store
        .renew_and_reclaim(Vec::new(), 120_000, 60_000)
        .await
        .expect("reclaim");
    assert_eq!(taken.unknown, 3, "{taken:?}");
    let of = |n: u32| lapsed.iter().find(|c| c.id == id(n)).expect("claimed");
    // The first attempt's request had arrived: its 201 comes late, and is fenced.
    let mut late = succeeded(of(1));
    late.http_status = Some(201);
    late.remote_id = Some("rec-1".into());
    assert_eq!(
        store.complete(late.clone()).await.expect("complete"),
        Applied::Fenced
    );
    assert!(store.late_answer(late.clone()).await.expect("late answer"));
    let d = get(&store, &id(1)).await;
    assert_eq!(d.status, DeliveryStatus::Succeeded);
    assert_eq!(
        (d.remote_id.as_deref(), d.last_response_code),
        (Some("rec-1"), Some(201))
    );
    let tried = attempts(&store, &id(1)).await;
    assert_eq!(
        (tried[0].outcome.as_deref(), tried[0].http_status),
        (Some("succeeded"), Some(201))
    );
    let log = log_of(&store, &id(1)).await;
    let last = log.last().expect("logged");
    assert_eq!((last.0, last.1), (Some("unknown"), "succeeded"));
    assert_eq!(last.3, "late_answer", "{log:?}");
    // Once settled, a second copy changes nothing.
    assert!(!store.late_answer(late).await.expect("late answer"));
    // A late failure settles nothing: the request may still have been taken.
    let mut failed = succeeded(of(2));
    failed.disposition = Disposition::Failed;
    failed.http_status = Some(400);
    assert!(!store.late_answer(failed).await.expect("late answer"));
    assert_eq!(get(&store, &id(2)).await.status, DeliveryStatus::Unknown);
    // An operator who decided first is not overruled.
    store
        .resolve(id(3), Resolution::Failed, "checked".into())
        .await
        .expect("resolve");
    assert!(!store
        .late_answer(succeeded(of(3)))
        .await
        .expect("late answer"));
    assert_eq!(get(&store, &id(3)).await.status, DeliveryStatus::Failed);
}

/// A task's status now.
async fn task_status(store: &Store, n: u32) -> spool_store::tasks::TaskStatus {
    store
        .get_task(id(n))
        .await
        .expect("get task")
        .expect("task exists")
        .status
}

/// Wait until the store's clock has reached `at`.
async fn wait_until(store: &Store, at: i64) {
    while store.now_ms() < at {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

//! The PostgreSQL backend: the conformance suite on a database of each test's own, plus what
//! only a shared server has to get right — durable commits read back, migrations raced by two
//! openers, an older schema migrated and a newer one refused, and two stores (two hosts) on one
//! database.

use std::time::Duration;

use spool_store::model::{Applied, DeliveryStatus, InsertOutcome, StartOutcome, TransitionOutcome};
use spool_store::postgres::{PgConfig, PgStore, SchemaFit, SCHEMA_VERSION};
use spool_store::{Capacity, Store, StoreError};
use spool_testkit::TestDatabase;

use crate::conformance::{self, Backend};

/// Where the deliveries these tests create would go (nothing is sent).
const URL: &str = "http://127.0.0.1:9/hook";

/// A database of the test's own, dropped when the test ends.
pub struct PgBackend {
    db: TestDatabase,
}

impl Backend for PgBackend {
    async fn fresh() -> Option<(Self, Store)> {
        let db = TestDatabase::create()
            .await
            .expect("create a test database")?;
        let store = open(db.url(), 0).await.expect("open a fresh store");
        Some((PgBackend { db }, store))
    }

    async fn reopen(&self, store: Store, max_db_bytes: u64) -> Store {
        drop(store);
        open(self.db.url(), max_db_bytes).await.expect("reopen")
    }
}

mod suite {
    crate::conformance::conformance_suite!(super::PgBackend);
}

async fn open(url: &str, max_db_bytes: u64) -> Result<Store, StoreError> {
    let mut config = PgConfig::new(url);
    config.max_db_bytes = max_db_bytes;
    PgStore::open(&config).await.map(Store::Postgres)
}

#[tokio::test(flavor = "multi_thread")]
async fn commits_are_synchronous() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    // Even when the server's default says otherwise, our sessions commit durably.
    db.execute(&format!(
        "ALTER DATABASE {} SET synchronous_commit = off",
        db.url().rsplit('/').next().unwrap_or_default()
    ))
    .await
    .expect("alter database");
    let store = PgStore::open(&PgConfig::new(db.url())).await.expect("open");
    assert_eq!(store.synchronous_commit().await.expect("show"), "on");
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_starting_together_migrate_once() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let opens = (0..4).map(|_| open(db.url(), 0));
    for opened in futures_util::future::join_all(opens).await {
        opened.expect("every opener gets a migrated store");
    }
    assert_eq!(
        db.scalar("SELECT string_agg(version::text, ',') FROM spoold_schema")
            .await
            .expect("version"),
        Some(SCHEMA_VERSION.to_string())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_older_schema_is_migrated() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    // Version 1 as an older spoold left it: its indexes and row triggers, without the step
    // functions of 2 and the statement triggers of 3 (version 4 dropped the index 2 added).
    drop(open(db.url(), 0).await.expect("first open"));
    db.execute(&format!(
        "{ORPHAN_COLUMNS} {ROW_TRIGGERS} {TAKING_STEPS} DROP FUNCTION spoold_steps, spoold_expire, spoold_now_ms; \
         CREATE INDEX deliveries_lease ON deliveries (lease_until) WHERE status = 'in_flight'; \
         ALTER TABLE deliveries RESET (fillfactor); UPDATE spoold_schema SET version = 1"
    ))
    .await
    .expect("step back to version 1");
    let store = reopen_migrated(&db).await;
    assert_eq!(
        db.scalar("SELECT (to_regclass('deliveries_in_flight') IS NULL)::text")
            .await
            .expect("index"),
        Some("true".to_owned()),
        "version 2 added the index, version 4 dropped it"
    );
    // The steps work on the migrated database.
    assert_eq!(
        store
            .reserve_next("http://127.0.0.1:9".into(), 1000)
            .await
            .expect("reserve"),
        None
    );
}

/// Open the database again: its schema is migrated to this binary's version.
async fn reopen_migrated(db: &TestDatabase) -> Store {
    let store = open(db.url(), 0).await.expect("reopen migrates");
    assert_eq!(
        db.scalar("SELECT version::text FROM spoold_schema")
            .await
            .expect("version"),
        Some(SCHEMA_VERSION.to_string())
    );
    store
}

/// Version 8's columns (orphaned task attempts), dropped: every step back goes below 8.
const ORPHAN_COLUMNS: &str = "ALTER TABLE tasks DROP COLUMN ending, DROP COLUMN executor_host; \
    ALTER TABLE task_attempts DROP COLUMN host, DROP COLUMN kill_grace_ms, DROP COLUMN sid;";

/// Version 6's step function (the one that takes), dropped: the older one is left.
const TAKING_STEPS: &str = "DROP FUNCTION spoold_steps(TEXT[], BIGINT[], TEXT[], BIGINT[], \
    BIGINT[], BIGINT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT, TEXT[], BIGINT[], TEXT[], \
    BIGINT, BIGINT[], BOOLEAN[]);";

/// The index version 4 dropped, put back as versions 2 and 3 had it.
const IN_FLIGHT_INDEX: &str =
    "CREATE INDEX deliveries_in_flight ON deliveries (id) WHERE status = 'in_flight';";

/// Version 3's statement-level count triggers put back as version 2 had them (per row).
const ROW_TRIGGERS: &str = "DROP TRIGGER deliveries_counted_in ON deliveries; \
    DROP TRIGGER deliveries_counted_out ON deliveries; \
    DROP FUNCTION spoold_count_deliveries_in, spoold_count_deliveries_out; \
    CREATE TRIGGER deliveries_counted_in AFTER INSERT ON deliveries \
        FOR EACH ROW EXECUTE FUNCTION spoold_count_delivery(); \
    CREATE TRIGGER deliveries_counted_out AFTER DELETE ON deliveries \
        FOR EACH ROW EXECUTE FUNCTION spoold_count_delivery();";

#[tokio::test(flavor = "multi_thread")]
async fn counts_stay_exact_across_the_move_to_statement_triggers() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    // Two deliveries counted by version 2's row triggers, then the move to version 3.
    let store = open(db.url(), 0).await.expect("first open");
    db.execute(&format!(
        "{ORPHAN_COLUMNS} {IN_FLIGHT_INDEX} {ROW_TRIGGERS} {TAKING_STEPS} \
         UPDATE spoold_schema SET version = 2"
    ))
    .await
    .expect("step back to version 2");
    for n in 1..=2 {
        conformance::create(
            &store,
            conformance::new_delivery(&conformance::id(n), None, URL),
        )
        .await;
    }
    drop(store);
    let store = reopen_migrated(&db).await;
    assert_eq!(
        db.scalar(
            "SELECT count(*)::text FROM pg_trigger WHERE tgname LIKE 'deliveries_counted_%' \
                   AND tgtype & 1 = 0"
        )
        .await
        .expect("statement triggers"),
        Some("2".into()),
        "creates and purges are counted per statement"
    );
    // Three more, created concurrently (some may share a statement), counted by version 3.
    let creates = (3..=5).map(|n| {
        let store = store.clone();
        async move {
            conformance::create(
                &store,
                conformance::new_delivery(&conformance::id(n), None, URL),
            )
            .await
        }
    });
    futures_util::future::join_all(creates).await;
    let pending = |stats: spool_store::model::Stats| {
        stats
            .by_status
            .iter()
            .find(|(s, _)| *s == DeliveryStatus::Pending)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(pending(store.stats().await.expect("stats")), 5);
}

/// Version 4 as an older spoold left it: keys under the database's own collation, status
/// changes counted by triggers that decide in a WHEN clause.
const VERSION_4: &str = "DROP TRIGGER deliveries_counted_moved ON deliveries; \
    DROP TRIGGER tasks_counted_moved ON tasks; \
    ALTER TABLE deliveries ALTER COLUMN id TYPE TEXT COLLATE \"default\", \
        ALTER COLUMN origin TYPE TEXT COLLATE \"default\", \
        ALTER COLUMN status TYPE TEXT COLLATE \"default\"; \
    ALTER TABLE attempts ALTER COLUMN delivery_id TYPE TEXT COLLATE \"default\"; \
    ALTER TABLE transitions ALTER COLUMN delivery_id TYPE TEXT COLLATE \"default\"; \
    ALTER TABLE tasks ALTER COLUMN id TYPE TEXT COLLATE \"default\", \
        ALTER COLUMN status TYPE TEXT COLLATE \"default\"; \
    CREATE TRIGGER deliveries_counted_moved AFTER UPDATE OF status ON deliveries \
        FOR EACH ROW WHEN (OLD.status <> NEW.status \
            AND current_setting('spoold.counting', true) IS DISTINCT FROM 'steps') \
        EXECUTE FUNCTION spoold_count_delivery(); \
    CREATE TRIGGER tasks_counted_moved AFTER UPDATE OF status ON tasks \
        FOR EACH ROW WHEN (OLD.status <> NEW.status) EXECUTE FUNCTION spoold_count_task(); \
    UPDATE spoold_schema SET version = 4";

#[tokio::test(flavor = "multi_thread")]
async fn a_populated_database_moves_to_bytewise_keys() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    // Three deliveries written under version 4's tables and triggers, one of them in flight
    // with its attempt started.
    let store = open(db.url(), 0).await.expect("first open");
    db.execute(&format!("{ORPHAN_COLUMNS} {TAKING_STEPS} {VERSION_4}"))
        .await
        .expect("step back to version 4");
    for n in 1..=3 {
        conformance::create(
            &store,
            conformance::new_delivery(&conformance::id(n), None, conformance::URL_A),
        )
        .await;
    }
    let capacity = Capacity {
        per_origin: 1,
        ..Capacity::default()
    };
    let claimed = store
        .claim_due(1, capacity, 60_000)
        .await
        .expect("claim")
        .claimed;
    let [first] = claimed.as_slice() else {
        panic!("expected one claim, got {claimed:?}");
    };
    drop(store);

    let store = reopen_migrated(&db).await;
    assert_eq!(
        db.scalar(
            "SELECT string_agg(a.attrelid::regclass || '.' || a.attname || ' ' || c.collname, \
                    ', ' ORDER BY a.attrelid::regclass::text, a.attname) \
             FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation \
             WHERE (a.attrelid, a.attname) IN (('deliveries'::regclass, 'id'), \
                 ('deliveries'::regclass, 'origin'), ('deliveries'::regclass, 'status'), \
                 ('attempts'::regclass, 'delivery_id'), ('tasks'::regclass, 'id'))"
        )
        .await
        .expect("collations"),
        Some(
            "attempts.delivery_id C, deliveries.id C, deliveries.origin C, \
             deliveries.status C, tasks.id C"
                .to_owned()
        )
    );
    assert_eq!(
        db.scalar(
            "SELECT count(*)::text FROM pg_trigger \
             WHERE tgname IN ('deliveries_counted_moved', 'tasks_counted_moved') \
               AND tgqual IS NULL"
        )
        .await
        .expect("triggers"),
        Some("2".to_owned()),
        "status changes are counted without a WHEN clause"
    );
    // The claim made under version 4 is recorded under 5, a status change outside the steps
    // is counted by the trigger, and one made by the steps by themselves.
    assert_eq!(
        store
            .complete(conformance::succeeded(first))
            .await
            .expect("complete"),
        Applied::Now(DeliveryStatus::Succeeded)
    );
    let reserved = store
        .reserve_next(conformance::ORIGIN_A.to_owned(), 60_000)
        .await
        .expect("reserve")
        .expect("due work");
    let other = [2, 3]
        .map(conformance::id)
        .into_iter()
        .find(|id| *id != reserved.id)
        .expect("the one not reserved");
    assert!(matches!(
        store.cancel(other).await.expect("cancel"),
        TransitionOutcome::Done(_)
    ));
    let stats = store.stats().await.expect("stats");
    let count = |status| {
        stats
            .by_status
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(
        [
            DeliveryStatus::Pending,
            DeliveryStatus::InFlight,
            DeliveryStatus::Succeeded,
            DeliveryStatus::Canceled
        ]
        .map(count),
        [0, 1, 1, 1]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_of_version_5_still_steps_on_version_6() {
    let Some((backend, store)) = PgBackend::fresh().await else {
        return;
    };
    conformance::create(
        &store,
        conformance::new_delivery(&conformance::id(1), None, conformance::URL_A),
    )
    .await;
    // The call an older spoold makes (16 arguments): it reserves, as it always did.
    let reserved = backend
        .db
        .scalar(&format!(
            "SELECT o_id || ' ' || o_claim_seq FROM spoold_steps('{{NULL}}', '{{NULL}}', \
             '{{NULL}}', '{{NULL}}', '{{NULL}}', '{{NULL}}', '{{NULL}}', '{{NULL}}', '{{NULL}}', \
             '{{NULL}}', 60000, '{{NULL}}', '{{NULL}}', ARRAY['{}'], 60000, '{{NULL}}')",
            conformance::ORIGIN_A
        ))
        .await
        .expect("the older call");
    assert_eq!(reserved, Some(format!("{} 1", conformance::id(1))));
    let d = store
        .get(conformance::id(1))
        .await
        .expect("get")
        .expect("the delivery");
    assert_eq!((d.status, d.attempts), (DeliveryStatus::InFlight, 0));
}

/// Version 7: the takes of one call for one origin each start where the one before found its
/// delivery — and still find, in due order, every due delivery, also one due before the
/// host's cursor (`p_from`), once nothing is found past it.
#[tokio::test(flavor = "multi_thread")]
async fn one_calls_takes_find_each_due_delivery_once() {
    let Some((backend, store)) = PgBackend::fresh().await else {
        return;
    };
    for n in 1..=4 {
        conformance::create(
            &store,
            conformance::new_delivery(&conformance::id(n), None, conformance::URL_A),
        )
        .await;
        // Due a second apart, the first earliest.
        backend
            .db
            .execute(&format!(
                "UPDATE deliveries SET next_attempt_at = next_attempt_at - {} WHERE id = '{}'",
                (5 - n) * 1000,
                conformance::id(n)
            ))
            .await
            .expect("set the due time");
    }
    let due_of_third = backend
        .db
        .scalar(&format!(
            "SELECT next_attempt_at::text FROM deliveries WHERE id = '{}'",
            conformance::id(3)
        ))
        .await
        .expect("due")
        .expect("a due time");
    // Four takes in one call, the first from a cursor at the third delivery's due time.
    let nulls = "'{NULL,NULL,NULL,NULL}'";
    let a = conformance::ORIGIN_A;
    let taken = backend
        .db
        .scalar(&format!(
            "SELECT string_agg(coalesce(o_id, '-'), ' ' ORDER BY o_n) FROM spoold_steps(\
             {nulls}, {nulls}, {nulls}, {nulls}, {nulls}, {nulls}, {nulls}, {nulls}, {nulls}, \
             {nulls}, 60000, {nulls}, {nulls}, ARRAY['{a}', '{a}', '{a}', '{a}'], 60000, \
             ARRAY[{due_of_third}, NULL, NULL, NULL]::BIGINT[], ARRAY[true, true, true, true])"
        ))
        .await
        .expect("the call")
        .expect("a row per step");
    let mut taken: Vec<&str> = taken.split(' ').collect();
    // The third and fourth first (past the cursor), then the first and second.
    assert_eq!(taken[..2], [conformance::id(3), conformance::id(4)]);
    taken.sort_unstable();
    let all: Vec<String> = (1..=4).map(conformance::id).collect();
    assert_eq!(taken, all);
    for n in 1..=4 {
        let d = store
            .get(conformance::id(n))
            .await
            .expect("get")
            .expect("the delivery");
        assert_eq!((d.status, d.attempts), (DeliveryStatus::InFlight, 1), "{n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_schema_is_refused() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    drop(open(db.url(), 0).await.expect("first open"));
    db.execute("UPDATE spoold_schema SET version = 99")
        .await
        .expect("bump the version");
    match open(db.url(), 0).await {
        Err(StoreError::TooNew { found: 99, .. }) => {}
        other => panic!("expected TooNew, got {other:?}"),
    }
}

/// A newer spoold's migration says which hosts may run beside it (`schema_oldest_host`): one
/// that still serves this binary's schema lets it open (and run); one that does not is refused
/// at open and seen by a store already open.
#[tokio::test(flavor = "multi_thread")]
async fn a_newer_schema_serves_the_hosts_it_names() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let store = open(db.url(), 0).await.expect("first open");
    assert_eq!(
        db.scalar("SELECT value FROM meta WHERE key = 'schema_oldest_host'")
            .await
            .expect("meta"),
        Some(format!(
            "{SCHEMA_VERSION}:{}",
            spool_store::postgres::OLDEST_HOST
        ))
    );
    assert_eq!(
        store.schema_fit().await.expect("fit"),
        Some(SchemaFit::Same)
    );
    let newer = SCHEMA_VERSION + 1;
    db.execute(&format!(
        "UPDATE spoold_schema SET version = {newer}; \
         UPDATE meta SET value = '{newer}:{SCHEMA_VERSION}' WHERE key = 'schema_oldest_host'"
    ))
    .await
    .expect("a migration that serves this binary");
    assert_eq!(
        store.schema_fit().await.expect("fit"),
        Some(SchemaFit::NewerCompatible { found: newer })
    );
    drop(
        open(db.url(), 0)
            .await
            .expect("opens beside the newer schema"),
    );
    // Opening did not write this binary's schema over the newer one.
    assert_eq!(
        db.scalar("SELECT version::text FROM spoold_schema")
            .await
            .expect("version"),
        Some(newer.to_string())
    );
    db.execute(&format!(
        "UPDATE meta SET value = '{newer}:{newer}' WHERE key = 'schema_oldest_host'"
    ))
    .await
    .expect("a migration past this binary");
    assert_eq!(
        store.schema_fit().await.expect("fit"),
        Some(SchemaFit::MovedPast {
            found: newer,
            oldest_host: newer
        })
    );
    match open(db.url(), 0).await {
        Err(StoreError::TooNew { found, .. }) => assert_eq!(found, newer),
        other => panic!("expected TooNew, got {other:?}"),
    }
    // A newer schema that names no hosts (or only an older schema's) serves only its own.
    db.execute(&format!(
        "UPDATE meta SET value = '{SCHEMA_VERSION}:1' WHERE key = 'schema_oldest_host'"
    ))
    .await
    .expect("delete");
    assert!(matches!(
        store.schema_fit().await.expect("fit"),
        Some(SchemaFit::MovedPast { .. })
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_is_unavailable() {
    // Port 1 on loopback: nothing listens there.
    match open("postgres://postgres@127.0.0.1:1/none", 0).await {
        Err(StoreError::Unavailable(message)) => {
            // The server, where it was sought, and why it did not answer.
            assert!(
                message.starts_with("PostgreSQL at 127.0.0.1:1: cannot connect: ")
                    && message.ends_with("Connection refused (os error 111)"),
                "{message}"
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reservations_find_work_due_before_where_they_left_off() {
    let Some((_db, store)) = PgBackend::fresh().await else {
        return;
    };
    let ids: Vec<String> = (1..=3).map(conformance::id).collect();
    for id in &ids {
        let new = conformance::new_delivery(id, None, conformance::URL_A);
        match store.insert(new).await.expect("insert") {
            InsertOutcome::Created(_) => {}
            other => panic!("expected Created, got {other:?}"),
        }
        // Distinct due times: the order below is by due time.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reserve = || store.reserve_next(conformance::ORIGIN_A.to_owned(), 60_000);
    let first = reserve().await.expect("reserve").expect("first");
    let second = reserve().await.expect("reserve").expect("second");
    assert_eq!((&first.id, &second.id), (&ids[0], &ids[1]));
    // The first is given back: due before where reservations got to. It is not lost: it is
    // found once nothing is due from there on (or by the search from the start that runs once
    // a second), so the next two are the third and it, in either order.
    assert!(store
        .release(first.id.clone(), first.claim_seq)
        .await
        .expect("release"));
    let mut next_two = Vec::new();
    for _ in 0..2 {
        next_two.push(reserve().await.expect("reserve").expect("due work").id);
    }
    next_two.sort();
    assert_eq!(next_two, [ids[0].clone(), ids[2].clone()]);
    assert_eq!(reserve().await.expect("reserve"), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_slots_advance_together() {
    let Some((_db, store)) = PgBackend::fresh().await else {
        return;
    };
    const SLOTS: u32 = 8;
    for n in 1..=SLOTS * 3 {
        let new = conformance::new_delivery(&conformance::id(n), None, conformance::URL_A);
        assert!(matches!(
            store.insert(new).await.expect("insert"),
            InsertOutcome::Created(_)
        ));
    }
    let capacity = Capacity {
        per_origin: SLOTS,
        ..Capacity::default()
    };
    let claimed = store
        .claim_due(SLOTS, capacity, 60_000)
        .await
        .expect("claim")
        .claimed;
    assert_eq!(claimed.len(), SLOTS as usize);
    let mut steps = Vec::new();
    for c in claimed {
        let next = store
            .reserve_next(conformance::ORIGIN_A.to_owned(), 60_000)
            .await
            .expect("reserve")
            .expect("due work");
        let result = conformance::succeeded(&c);
        steps.push((result, next));
    }
    // Every slot at once: written in batches, each answered with its own step.
    let advanced = futures_util::future::join_all(
        steps
            .iter()
            .map(|(result, next)| store.advance(Some(result.clone()), next.clone(), true, 60_000)),
    )
    .await;
    let mut reserved = Vec::new();
    for ((result, next), advanced) in steps.iter().zip(advanced) {
        assert_eq!(
            advanced.applied.expect("a result").expect("recorded"),
            Applied::Now(DeliveryStatus::Succeeded)
        );
        match advanced.started.expect("start") {
            StartOutcome::Started(c) => assert_eq!((&c.id, c.attempt), (&next.id, 1)),
            other => panic!("expected Started, got {other:?}"),
        }
        reserved.push(advanced.reserved.expect("reserve").expect("due work").id);
        assert_eq!(
            store
                .get(result.id.clone())
                .await
                .expect("get")
                .map(|d| d.status),
            Some(DeliveryStatus::Succeeded)
        );
    }
    // The third round: each reserved once, none twice.
    reserved.sort();
    reserved.dedup();
    assert_eq!(reserved.len(), SLOTS as usize);
    // The counts the steps kept agree.
    let stats = store.stats().await.expect("stats");
    let count = |status| {
        stats
            .by_status
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(count(DeliveryStatus::Succeeded), u64::from(SLOTS));
    assert_eq!(count(DeliveryStatus::InFlight), u64::from(SLOTS) * 2);
    assert_eq!(count(DeliveryStatus::Pending), 0);
}

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

/// A PostgreSQL store whose database counts creates and purges per row, as on a database
/// without transition tables (YugabyteDB, CockroachDB): `spoold.transition_tables = off` for
/// every session of the database makes the functions take that path.
struct RowCountsBackend {
    _db: TestDatabase,
}

impl Backend for RowCountsBackend {
    async fn fresh() -> Option<(Self, Store)> {
        let db = TestDatabase::create()
            .await
            .expect("create a test database")?;
        db.execute(&format!(
            "ALTER DATABASE {} SET spoold.transition_tables = off",
            db.name()
        ))
        .await
        .expect("alter database");
        let store = open(db.url(), 0).await.expect("open a fresh store");
        let per_row = db
            .scalar(
                "SELECT count(*)::text FROM pg_trigger WHERE tgname IN \
                 ('deliveries_counted_in', 'deliveries_counted_out') AND tgtype & 1 = 1",
            )
            .await
            .expect("triggers");
        assert_eq!(
            per_row.as_deref(),
            Some("2"),
            "creates and purges counted per row"
        );
        Some((RowCountsBackend { _db: db }, store))
    }

    async fn reopen(&self, store: Store, max_db_bytes: u64) -> Store {
        drop(store);
        open(self._db.url(), max_db_bytes).await.expect("reopen")
    }
}

/// The counting tests again, with creates and purges counted per row.
mod row_counts {
    crate::conformance::conformance_suite!(@store super::RowCountsBackend;
        counts_follow_every_change,
        purge_finished_removes_only_old_terminal_rows,
        next_due_and_stats,
        concurrent_inserts_with_one_key_create_once,
    );
}

async fn open(url: &str, max_db_bytes: u64) -> Result<Store, StoreError> {
    let mut config = PgConfig::new(url);
    config.max_db_bytes = max_db_bytes;
    config.connections = spool_testkit::pg::TEST_DB_CONNECTIONS;
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
    let mut config = PgConfig::new(db.url());
    config.connections = spool_testkit::pg::TEST_DB_CONNECTIONS;
    let store = PgStore::open(&config).await.expect("open");
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

/// The schema each older version left, as its binary applied it: tables and functions alike
/// (`tests/fixtures/postgres-history`, one file per version).
const HISTORY: &[&str] = &[
    include_str!("../fixtures/postgres-history/v1-schema.sql"),
    include_str!("../fixtures/postgres-history/v2-steps.sql"),
    include_str!("../fixtures/postgres-history/v3-counts.sql"),
    include_str!("../fixtures/postgres-history/v4-in_flight.sql"),
    include_str!("../fixtures/postgres-history/v5-lean_steps.sql"),
    include_str!("../fixtures/postgres-history/v6-take.sql"),
    include_str!("../fixtures/postgres-history/v7-carry.sql"),
    include_str!("../fixtures/postgres-history/v8-orphans.sql"),
    include_str!("../fixtures/postgres-history/v9-sign_secret.sql"),
];

/// Everything a schema is made of, one line per object, sorted: columns (type, collation,
/// nullability, default), constraints, indexes, tables' storage options, triggers and
/// functions with their bodies.
const CATALOG: &str = "SELECT string_agg(x, E'\n' ORDER BY x) FROM (
    SELECT 'column ' || c.relname || '.' || a.attname || ' ' \
        || format_type(a.atttypid, a.atttypmod) || ' ' || coalesce(co.collname, '-') || ' ' \
        || a.attnotnull || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-') AS x
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_collation co ON co.oid = a.attcollation
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
        AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL SELECT 'constraint ' || conrelid::regclass || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
    UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = current_schema()
    UNION ALL SELECT 'table ' || relname || ' ' || coalesce(array_to_string(reloptions, ','), '-')
    FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'
    UNION ALL SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t
    JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
    UNION ALL SELECT 'function ' || pg_get_functiondef(p.oid) FROM pg_proc p
    WHERE p.pronamespace = current_schema()::regnamespace
) catalog";

/// A database as the spoold of schema `version` left it, holding an in-flight delivery (its
/// attempt started under claim 1), a pending one, and a pending task — written with version
/// 1's columns, as any version has them, and counted by that version's triggers.
async fn database_at(version: usize) -> Option<TestDatabase> {
    let db = TestDatabase::create().await.expect("test database")?;
    let mut sql = HISTORY[..version].concat();
    sql.push_str(&format!(
        "CREATE TABLE spoold_schema (version BIGINT NOT NULL);
         INSERT INTO spoold_schema (version) VALUES ({version});
         INSERT INTO deliveries (id, target_url, origin, method, headers, body_kind, body,
             status, attempts, max_attempts, claim_seq, created_at, updated_at,
             next_attempt_at, lease_until)
         VALUES ('{in_flight}', '{URL_A}', '{ORIGIN_A}', 'POST', '[]', 0, NULL, 'in_flight', 1,
                 5, 1, 1, 1, NULL, 9000000000000),
                ('{pending}', '{URL_A}', '{ORIGIN_A}', 'POST', '[]', 0, NULL, 'pending', 0, 5, 0,
                 2, 2, 2, NULL);
         INSERT INTO attempts (delivery_id, seq, cycle, number, started_at)
         VALUES ('{in_flight}', 1, 1, 1, 1);
         INSERT INTO tasks (id, task_type, scope, params, digest, status, max_attempts,
             created_at, updated_at, next_run_at)
         VALUES ('{task}', 'backup', 'backup', '{{}}', '\\x00', 'pending', 1, 1, 1, 1);",
        in_flight = conformance::id(1),
        pending = conformance::id(2),
        task = conformance::id(3),
        URL_A = conformance::URL_A,
        ORIGIN_A = conformance::ORIGIN_A,
    ));
    db.execute(&sql)
        .await
        .expect("the older schema and its rows");
    Some(db)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_older_schema_is_migrated_to_what_a_fresh_database_has() {
    let Some(fresh) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    drop(open(fresh.url(), 0).await.expect("a fresh store"));
    let wanted = fresh.scalar(CATALOG).await.expect("catalog");
    for version in 1..=HISTORY.len() {
        let Some(db) = database_at(version).await else {
            return;
        };
        let store = reopen_migrated(&db).await;
        let found = db.scalar(CATALOG).await.expect("catalog");
        if found != wanted {
            let (found, wanted) = (
                found.unwrap_or_default(),
                wanted.clone().unwrap_or_default(),
            );
            let only = |a: &str, b: &str| -> Vec<String> {
                let b: std::collections::BTreeSet<&str> = b.split('\n').collect();
                a.split('\n')
                    .filter(|l| !b.contains(l))
                    .map(str::to_owned)
                    .collect()
            };
            panic!(
                "from version {version}: only in the migrated database: {:#?}\n\
                 only in a fresh one: {:#?}",
                only(&found, &wanted),
                only(&wanted, &found)
            );
        }
        // The rows came through, counted as that version counted them; the claim made under
        // it is recorded now, and the steps reserve the pending delivery.
        let count = |stats: &spool_store::model::Stats, status| {
            stats
                .by_status
                .iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, n)| *n)
        };
        let stats = store.stats().await.expect("stats");
        assert_eq!(
            [DeliveryStatus::Pending, DeliveryStatus::InFlight].map(|s| count(&stats, s)),
            [1, 1],
            "from version {version}"
        );
        let recorded = store
            .complete(spool_store::model::AttemptResult {
                id: conformance::id(1),
                claim_seq: 1,
                disposition: spool_store::model::Disposition::Succeeded,
                http_status: Some(200),
                error_code: None,
                error: None,
                duration_ms: 1,
                remote_id: None,
            })
            .await
            .expect("complete");
        assert_eq!(recorded, Applied::Now(DeliveryStatus::Succeeded));
        let reserved = store
            .reserve_next(conformance::ORIGIN_A.to_owned(), 60_000)
            .await
            .expect("reserve")
            .expect("the pending delivery");
        assert_eq!(reserved.id, conformance::id(2), "from version {version}");
        assert!(matches!(
            store.cancel(conformance::id(2)).await.expect("cancel"),
            TransitionOutcome::Done(_)
        ));
        let stats = store.stats().await.expect("stats");
        assert_eq!(
            [
                DeliveryStatus::Pending,
                DeliveryStatus::InFlight,
                DeliveryStatus::Succeeded,
                DeliveryStatus::Canceled
            ]
            .map(|s| count(&stats, s)),
            [0, 0, 1, 1],
            "from version {version}"
        );
        let tasks = db
            .scalar("SELECT sum(n)::text FROM task_count_deltas WHERE status = 'pending'")
            .await
            .expect("task counts");
        assert_eq!(tasks.as_deref(), Some("1"), "from version {version}");
        // Opened again, nothing is redefined: the functions in force are these very ones.
        let steps = "SELECT 'spoold_steps'::regproc::oid::text";
        let before = db.scalar(steps).await.expect("oid");
        drop(store);
        drop(reopen_migrated(&db).await);
        assert_eq!(db.scalar(steps).await.expect("oid"), before);
    }
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

#[tokio::test(flavor = "multi_thread")]
async fn functions_changed_by_hand_are_put_back() {
    let Some((backend, store)) = PgBackend::fresh().await else {
        return;
    };
    drop(store);
    // A function dropped, and a fingerprint that no longer says what the database holds.
    backend
        .db
        .execute(
            "DROP FUNCTION spoold_expire; \
             UPDATE meta SET value = 'edited' WHERE key = 'schema_functions'",
        )
        .await
        .expect("edit the functions");
    drop(reopen_migrated(&backend.db).await);
    assert_eq!(
        backend
            .db
            .scalar("SELECT (to_regproc('spoold_expire') IS NOT NULL)::text")
            .await
            .expect("function"),
        Some("true".to_owned())
    );
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

/// Transactions run at READ COMMITTED, which every statement is written for, even when the
/// database's default says otherwise (under REPEATABLE READ a task claim would count what ran
/// as of its first statement, before the claim gate let it in).
#[tokio::test(flavor = "multi_thread")]
async fn sessions_run_read_committed_whatever_the_default() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    db.execute(&format!(
        "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'",
        db.name()
    ))
    .await
    .expect("alter database");
    let mut config = PgConfig::new(db.url());
    config.connections = spool_testkit::pg::TEST_DB_CONNECTIONS;
    let store = PgStore::open(&config).await.expect("open");
    assert_eq!(
        store.transaction_isolation().await.expect("show"),
        "read committed"
    );
}

/// A store on `url` with LISTEN/NOTIFY on or off, polling every `poll`.
async fn open_waking(url: &str, notify: bool, poll: Duration) -> PgStore {
    let mut config = PgConfig::new(url);
    config.connections = spool_testkit::pg::TEST_DB_CONNECTIONS;
    config.notify = notify;
    config.poll_interval = poll;
    PgStore::open(&config).await.expect("open")
}

/// Whether `wake` is notified within `within`.
async fn woken(wake: &tokio::sync::Notify, within: Duration) -> bool {
    tokio::time::timeout(within, wake.notified()).await.is_ok()
}

/// Sessions of the database other than the asking one whose last statement was a LISTEN,
/// UNLISTEN or NOTIFY (a listening connection runs nothing else), or that called pg_notify.
const LISTENING_SESSIONS: &str = "SELECT count(*) FROM pg_stat_activity \
     WHERE datname = current_database() AND pid <> pg_backend_pid() \
     AND (query ~* '^\\s*(LISTEN|UNLISTEN|NOTIFY)\\M' OR query ~* 'pg_notify\\s*\\(')";

/// Without LISTEN/NOTIFY (`notify` off) a store opens no listening connection and sends no
/// NOTIFY: a create wakes its own host at once (in process) and the other host not at all
/// until its poll; the poll alone wakes it, every `poll_interval`. With notify on, as a
/// control, the same create wakes the other host at once, and the probe sees its LISTEN.
#[tokio::test(flavor = "multi_thread")]
async fn without_notify_hosts_poll_and_never_listen() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let long = Duration::from_secs(3600);
    let settle = Duration::from_secs(5);

    // Off, with a poll too slow to matter: only the first tick (at once) wakes anyone.
    let (a, b) = (
        open_waking(db.url(), false, long).await,
        open_waking(db.url(), false, long).await,
    );
    let (wake_a, wake_b) = (a.work_available(), b.work_available());
    assert!(
        woken(&wake_a, settle).await,
        "the first poll rescans at start"
    );
    assert!(
        woken(&wake_b, settle).await,
        "the first poll rescans at start"
    );
    conformance::create(
        &Store::Postgres(a.clone()),
        conformance::new_delivery(&conformance::id(1), None, conformance::URL_A),
    )
    .await;
    assert!(
        woken(&wake_a, Duration::from_millis(100)).await,
        "a create wakes its own host in process"
    );
    assert!(
        !woken(&wake_b, Duration::from_millis(700)).await,
        "without NOTIFY the other host hears nothing before its poll"
    );
    assert_eq!(
        db.scalar(LISTENING_SESSIONS)
            .await
            .expect("probe")
            .as_deref(),
        Some("0")
    );
    drop((a, b));

    // Off, polling every 100 ms: woken again and again with nothing written.
    let polling = open_waking(db.url(), false, Duration::from_millis(100)).await;
    let wake = polling.work_available();
    let tasks = polling.tasks_available();
    let started = std::time::Instant::now();
    for _ in 0..5 {
        assert!(woken(&wake, settle).await, "the poll wakes the scheduler");
        assert!(
            woken(&tasks, settle).await,
            "the poll wakes the task runner"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        db.scalar(LISTENING_SESSIONS)
            .await
            .expect("probe")
            .as_deref(),
        Some("0")
    );
    drop(polling);

    // On (the control): the same create wakes the other host through NOTIFY, and the probe
    // finds the listening connections.
    let (c, d) = (
        open_waking(db.url(), true, long).await,
        open_waking(db.url(), true, long).await,
    );
    let (wake_c, wake_d) = (c.work_available(), d.work_available());
    // Each wakes its waiters once it LISTENs (and at its first poll, just after: drained).
    for wake in [&wake_c, &wake_d] {
        assert!(woken(wake, settle).await, "listening");
        woken(wake, Duration::from_millis(200)).await;
    }
    conformance::create(
        &Store::Postgres(c.clone()),
        conformance::new_delivery(&conformance::id(2), None, conformance::URL_A),
    )
    .await;
    assert!(
        woken(&wake_d, settle).await,
        "with NOTIFY the other host is told"
    );
    let listening: u32 = db
        .scalar(LISTENING_SESSIONS)
        .await
        .expect("probe")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert_eq!(listening, 2, "one listening connection per store");
}

-- Version 1: the same tables as the SQLite schema at its latest version. Times are integer
-- milliseconds since the epoch, read from the database's clock.

CREATE TABLE deliveries (
    id                 TEXT    NOT NULL PRIMARY KEY,
    idempotency_key    TEXT,
    target_url         TEXT    NOT NULL,
    origin             TEXT    NOT NULL,
    method             TEXT    NOT NULL,
    headers            TEXT    NOT NULL,
    body_kind          BIGINT  NOT NULL,
    body               BYTEA,
    status             TEXT    NOT NULL,
    attempts           BIGINT  NOT NULL DEFAULT 0,
    uncharged          BIGINT  NOT NULL DEFAULT 0,
    max_attempts       BIGINT  NOT NULL,
    claim_seq          BIGINT  NOT NULL DEFAULT 0,
    cycle              BIGINT  NOT NULL DEFAULT 1,
    last_error         TEXT,
    last_error_code    TEXT,
    last_response_code BIGINT,
    created_at         BIGINT  NOT NULL,
    updated_at         BIGINT  NOT NULL,
    next_attempt_at    BIGINT,
    not_before         BIGINT,
    expires_at         BIGINT,
    lease_until        BIGINT,
    log_seq            BIGINT  NOT NULL DEFAULT 0,
    mode               TEXT    NOT NULL DEFAULT 'at_least_once',
    fingerprint        TEXT,
    reconcile          TEXT,
    remote_id_pointer  TEXT,
    window_ms          BIGINT,
    remote_id          TEXT,
    unknown_since      BIGINT,
    review_at          BIGINT,
    check_at           BIGINT,
    checks             BIGINT  NOT NULL DEFAULT 0
);
-- The claim path: due pending work in due order, ties by id (partial, so it holds only
-- pending rows and a claim reads only what it takes, however large the backlog).
CREATE INDEX deliveries_due ON deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX deliveries_origin_due ON deliveries (origin, next_attempt_at, id)
    WHERE status = 'pending';
CREATE INDEX deliveries_lease ON deliveries (lease_until) WHERE status = 'in_flight';
CREATE INDEX deliveries_status ON deliveries (status, id);
CREATE INDEX deliveries_finished ON deliveries (updated_at)
    WHERE status IN ('succeeded', 'failed', 'canceled');
CREATE INDEX deliveries_expiry ON deliveries (expires_at)
    WHERE status = 'pending' AND expires_at IS NOT NULL;
CREATE INDEX deliveries_checks ON deliveries (check_at, id) WHERE status = 'unknown';

CREATE TABLE attempts (
    delivery_id TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    cycle       BIGINT NOT NULL,
    number      BIGINT NOT NULL,
    started_at  BIGINT NOT NULL,
    finished_at BIGINT,
    outcome     TEXT,
    http_status BIGINT,
    error_code  TEXT,
    error       TEXT,
    duration_ms BIGINT,
    PRIMARY KEY (delivery_id, seq)
);

-- Two hosts racing on one key: the primary key lets exactly one insert win.
CREATE TABLE idempotency_keys (
    key         TEXT  NOT NULL PRIMARY KEY,
    delivery_id TEXT  NOT NULL,
    fingerprint BYTEA NOT NULL
);

CREATE TABLE transitions (
    delivery_id TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    from_status TEXT,
    to_status   TEXT   NOT NULL,
    attempt     BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    reason      TEXT   NOT NULL,
    note        TEXT,
    PRIMARY KEY (delivery_id, seq)
);

CREATE TABLE checks (
    delivery_id TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    http_status BIGINT,
    matches     BIGINT,
    error_code  TEXT,
    error       TEXT,
    duration_ms BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, seq)
);

CREATE TABLE meta (
    key   TEXT NOT NULL PRIMARY KEY,
    value TEXT
);

-- Deliveries counted by origin and status, kept by triggers in the transactions that change
-- them. Unlike SQLite's counters (one writer), a row per count would be a hot row every
-- concurrent transaction queues on until it commits: so every change appends a delta
-- (+1/-1) and readers sum them; `compact_counts` folds the deltas now and then. Exact across
-- crashes: a delta commits or rolls back with the change it counts.
CREATE TABLE delivery_count_deltas (
    origin TEXT   NOT NULL,
    status TEXT   NOT NULL,
    n      BIGINT NOT NULL
);
CREATE INDEX delivery_count_deltas_origin ON delivery_count_deltas (origin, status);


CREATE TABLE tasks (
    id               TEXT    NOT NULL PRIMARY KEY,
    task_type        TEXT    NOT NULL,
    scope            TEXT    NOT NULL,
    idempotency_key  TEXT,
    params           TEXT    NOT NULL,
    digest           BYTEA   NOT NULL,
    status           TEXT    NOT NULL,
    attempts         BIGINT  NOT NULL DEFAULT 0,
    max_attempts     BIGINT  NOT NULL,
    claim_seq        BIGINT  NOT NULL DEFAULT 0,
    log_seq          BIGINT  NOT NULL DEFAULT 0,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    next_run_at      BIGINT,
    not_before       BIGINT,
    queue_deadline   BIGINT,
    retry_deadline   BIGINT,
    lease_until      BIGINT,
    executor_id      TEXT,
    error_code       TEXT,
    error            TEXT,
    exit_code        BIGINT,
    signal           BIGINT,
    result_summary   TEXT,
    cancel_requested BOOLEAN NOT NULL DEFAULT false,
    locks            TEXT,
    UNIQUE (scope, idempotency_key)
);
CREATE INDEX tasks_due ON tasks (next_run_at, id) WHERE status = 'pending';
CREATE INDEX tasks_queued ON tasks (queue_deadline)
    WHERE status = 'pending' AND attempts = 0 AND queue_deadline IS NOT NULL;
CREATE INDEX tasks_retry_deadline ON tasks (retry_deadline)
    WHERE status = 'pending' AND retry_deadline IS NOT NULL;
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_type ON tasks (task_type, id);
CREATE INDEX tasks_running ON tasks (lease_until) WHERE status = 'running';
CREATE INDEX tasks_locked ON tasks (next_run_at, id) WHERE status = 'pending' AND locks IS NOT NULL;

CREATE TABLE task_attempts (
    task_id          TEXT    NOT NULL,
    number           BIGINT  NOT NULL,
    started_at       BIGINT  NOT NULL,
    finished_at      BIGINT,
    outcome          TEXT,
    exit_code        BIGINT,
    signal           BIGINT,
    error_code       TEXT,
    error            TEXT,
    duration_ms      BIGINT,
    executor_id      TEXT    NOT NULL,
    output_bytes     BIGINT,
    output_truncated BOOLEAN,
    killed           BOOLEAN,
    pgid             BIGINT,
    leader_start     BIGINT,
    boot_id          TEXT,
    redactions       BIGINT,
    PRIMARY KEY (task_id, number)
);

CREATE TABLE task_transitions (
    task_id     TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    from_status TEXT,
    to_status   TEXT   NOT NULL,
    attempt     BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    reason      TEXT   NOT NULL,
    note        TEXT,
    PRIMARY KEY (task_id, seq)
);

-- Resource locks: one row per held lock, its name the key (one holder at a time, across
-- every host on this database). A lock is released by the transaction that ends its holder's
-- attempt, or taken back with the holder's lease when that host stops renewing it.
CREATE TABLE task_locks (
    name    TEXT   NOT NULL PRIMARY KEY,
    task_id TEXT   NOT NULL,
    since   BIGINT NOT NULL
);
CREATE INDEX task_locks_task ON task_locks (task_id);

CREATE TABLE task_steps (
    task_id TEXT   NOT NULL,
    name    TEXT   NOT NULL,
    attempt BIGINT NOT NULL,
    at      BIGINT NOT NULL,
    PRIMARY KEY (task_id, name)
);

-- Tasks by status, as deltas (see delivery_count_deltas).
CREATE TABLE task_count_deltas (
    status TEXT   NOT NULL,
    n      BIGINT NOT NULL
);

-- Task claims take this row's lock first (`FOR UPDATE`), so two hosts never count a type's
-- running tasks or a lock's waiters at the same time: quotas and lock order hold across
-- hosts on rows and transactions alone.
CREATE TABLE task_claim_gate (
    name TEXT NOT NULL PRIMARY KEY
);
INSERT INTO task_claim_gate (name) VALUES ('claim');

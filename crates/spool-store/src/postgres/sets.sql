-- spoold's PostgreSQL schema, version 3: set-based writes. Every statement PostgreSQL runs
-- pays its executor start-up (opening the table and its indexes, building the plan's state),
-- and a busy delivery path ran some nine statements per delivery inside `spoold_steps` and one
-- per created row in the count trigger. Now a batch of steps is a handful of statements
-- whatever its size, and a statement that creates or purges rows counts them once.

-- Creates and purges are counted per statement, from the rows they touched (transition
-- tables), instead of one INSERT per row. Status changes stay counted per row (a trigger with
-- transition tables cannot name the columns it fires on, and would collect every start and
-- lease renewal); `spoold_steps` counts its own.
CREATE FUNCTION spoold_count_deliveries_in() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_count_deltas (origin, status, n)
    SELECT origin, status, count(*) FROM spoold_new GROUP BY origin, status;
    RETURN NULL;
END $$;
CREATE FUNCTION spoold_count_deliveries_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_count_deltas (origin, status, n)
    SELECT origin, status, -count(*) FROM spoold_old GROUP BY origin, status;
    RETURN NULL;
END $$;
DROP TRIGGER deliveries_counted_in ON deliveries;
DROP TRIGGER deliveries_counted_out ON deliveries;
CREATE TRIGGER deliveries_counted_in AFTER INSERT ON deliveries
    REFERENCING NEW TABLE AS spoold_new
    FOR EACH STATEMENT EXECUTE FUNCTION spoold_count_deliveries_in();
CREATE TRIGGER deliveries_counted_out AFTER DELETE ON deliveries
    REFERENCING OLD TABLE AS spoold_old
    FOR EACH STATEMENT EXECUTE FUNCTION spoold_count_deliveries_out();

-- The same contract as version 2 (see steps.sql): one row per element, in order (`o_n`), each
-- element's parts skipped when their first argument is NULL. What changed is how: each part is
-- one statement over all elements that have it — results, then starts, then reservations —
-- and the clock is read once per call (every step of a call happens at `o_now`). A start that
-- does not happen (rare: a cancel, another host's take-back, a passed deadline) is looked at
-- on its own to say why. Reservations for one origin are taken together, oldest due first, and
-- handed to the call's elements for that origin in their order.
CREATE OR REPLACE FUNCTION spoold_steps(p_id TEXT[], p_claim_seq BIGINT[],
    p_disposition TEXT[], p_delay_ms BIGINT[], p_check_in_ms BIGINT[], p_http_status BIGINT[],
    p_error_code TEXT[], p_error TEXT[], p_duration_ms BIGINT[], p_remote_id TEXT[],
    p_default_window_ms BIGINT, p_next_id TEXT[], p_next_claim_seq BIGINT[], p_origin TEXT[],
    p_lease_ms BIGINT, p_from BIGINT[],
    OUT o_n INT, OUT o_applied TEXT,
    OUT o_outcome TEXT, OUT o_now BIGINT, OUT o_attempts BIGINT, OUT o_cycle BIGINT,
    OUT o_target_url TEXT, OUT o_method TEXT, OUT o_headers TEXT, OUT o_body_kind BIGINT,
    OUT o_body BYTEA, OUT o_mode TEXT, OUT o_remote_id_pointer TEXT,
    OUT o_id TEXT, OUT o_claim_seq BIGINT, OUT o_due BIGINT)
RETURNS SETOF RECORD LANGUAGE plpgsql
-- Its statements are planned once per session, for any arguments (planning them anew for each
-- call's arrays, as PostgreSQL otherwise decides to, costs more than running them), and often
-- while the tables are still empty, when any plan looks cheap: so every statement names the
-- rows it writes by an index condition (ids, or an origin's due range), never by a join the
-- planner could turn into a scan of a whole table, and sequential scans, which a plan made on
-- an empty table would keep as it grows, are ruled out.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_start CONSTANT BIGINT := -9223372036854775808;
    v_len INT := coalesce(cardinality(p_id), 0);
    v_now BIGINT := spoold_now_ms();
    -- Per element: the new status of its result, how its start went, what it reserved.
    v_applied TEXT[] := array_fill(NULL::TEXT, ARRAY[v_len]);
    v_outcome TEXT[] := array_fill(NULL::TEXT, ARRAY[v_len]);
    v_res_id TEXT[] := array_fill(NULL::TEXT, ARRAY[v_len]);
    v_res_claim BIGINT[] := array_fill(NULL::BIGINT, ARRAY[v_len]);
    v_res_due BIGINT[] := array_fill(NULL::BIGINT, ARRAY[v_len]);
    -- Count changes of this call: (origin, status, +1/-1), written as one net delta at the end.
    v_origins TEXT[] := '{}';
    v_statuses TEXT[] := '{}';
    v_ns BIGINT[] := '{}';
    v_n INT[];
    v_a TEXT[];
    v_b TEXT[];
    v_ids TEXT[];
    v_started TEXT[] := '{}';
    v_claims BIGINT[];
    v_dues BIGINT[];
    v_origin TEXT;
    v_want INT;
    v_from BIGINT;
    v_elems INT[];
    v_got INT;
    v_seen INT;
    v_looked INT;
    v_expired_ids TEXT[];
BEGIN
    -- This call counts its own status changes (see the trigger in steps.sql).
    PERFORM set_config('spoold.counting', 'steps', true);

    -- Rows are found by id, locked, and their claims checked before anything is written:
    -- the writes then name their rows by id alone. (A fence in an UPDATE's WHERE would let
    -- the planner start from the status index, whose `in_flight` entries are mostly dead ones
    -- of deliveries long past it, walked by every scan until the next vacuum.)

    -- 1. Results. Every expression on the right reads the row as it was. A retry that used
    -- the last allowed attempt ends the delivery; a retry waits no longer than the deadline
    -- (the claim then fails it as expired); entering `unknown` starts its clock (first check,
    -- end of the window). The attempt row is finished whether or not the claim is current.
    WITH d AS MATERIALIZED (
        SELECT id, status, claim_seq FROM deliveries WHERE id = ANY (p_id) FOR UPDATE
    )
    SELECT array_agg(r.n::int) INTO v_n
    FROM unnest(p_id, p_claim_seq) WITH ORDINALITY AS r (id, claim_seq, n)
    JOIN d ON d.id = r.id
    WHERE d.status = 'in_flight' AND d.claim_seq = r.claim_seq;
    WITH r AS (
        SELECT * FROM unnest(p_id, p_claim_seq, p_disposition, p_delay_ms, p_check_in_ms,
            p_http_status, p_error_code, p_error, p_duration_ms, p_remote_id)
            WITH ORDINALITY AS r (id, claim_seq, disposition, delay_ms, check_in_ms,
                http_status, error_code, error, duration_ms, remote_id, n)
        WHERE id IS NOT NULL
    ), u AS (
        UPDATE deliveries d SET
            status = CASE r.disposition
                WHEN 'retry' THEN CASE WHEN greatest(d.attempts - d.uncharged, 0) >= d.max_attempts
                                  THEN 'failed' ELSE 'pending' END
                WHEN 'interrupted' THEN 'pending'
                ELSE r.disposition END,
            next_attempt_at = CASE r.disposition
                WHEN 'retry' THEN CASE WHEN greatest(d.attempts - d.uncharged, 0) >= d.max_attempts
                                  THEN NULL
                                  ELSE least(v_now + greatest(r.delay_ms, 0), d.expires_at) END
                WHEN 'interrupted' THEN v_now
                ELSE NULL END,
            uncharged = d.uncharged + CASE WHEN r.disposition = 'interrupted' THEN 1 ELSE 0 END,
            last_error = CASE WHEN r.disposition = 'succeeded' THEN NULL ELSE r.error END,
            last_error_code = CASE WHEN r.disposition = 'succeeded' THEN NULL
                              ELSE r.error_code END,
            last_response_code = COALESCE(r.http_status, d.last_response_code),
            lease_until = NULL, updated_at = v_now, log_seq = d.log_seq + 1,
            remote_id = COALESCE(r.remote_id, d.remote_id),
            unknown_since = CASE WHEN r.disposition = 'unknown' THEN v_now
                            ELSE d.unknown_since END,
            check_at = CASE WHEN r.disposition = 'unknown'
                       THEN v_now + greatest(r.check_in_ms, 0) END,
            review_at = CASE WHEN r.disposition = 'unknown'
                        THEN v_now + COALESCE(d.window_ms, p_default_window_ms)
                        ELSE d.review_at END
        FROM r
        WHERE d.id = ANY (p_id) AND d.id = r.id AND r.n = ANY (v_n)
        RETURNING r.n, d.id, d.status, d.log_seq, d.attempts, d.origin
    ), a AS (
        UPDATE attempts t SET finished_at = v_now,
            outcome = CASE WHEN r.disposition = 'retry' AND u.status = 'failed' THEN 'failed'
                      ELSE r.disposition END,
            http_status = r.http_status, error_code = r.error_code, error = r.error,
            duration_ms = r.duration_ms
        FROM r LEFT JOIN u ON u.n = r.n
        WHERE t.delivery_id = ANY (p_id) AND t.delivery_id = r.id AND t.seq = r.claim_seq
            AND t.outcome IS NULL
    ), l AS (
        INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at, reason,
            note)
        SELECT u.id, u.log_seq, 'in_flight', u.status, u.attempts, v_now,
            CASE
                WHEN r.disposition = 'succeeded' THEN 'delivered'
                WHEN r.error_code IS NOT NULL THEN r.error_code
                WHEN r.disposition = 'failed' THEN 'failed'
                WHEN r.disposition = 'unknown' THEN 'unknown'
                ELSE 'retry' END,
            CASE
                WHEN u.status = 'failed' AND r.disposition = 'retry' THEN 'no attempts left'
                WHEN u.status = 'unknown'
                    THEN 'the request may have reached the target; not resent' END
        FROM u JOIN r ON r.n = u.n
    )
    SELECT array_agg(u.n::int), array_agg(u.status), array_agg(u.origin)
    INTO v_n, v_a, v_b FROM u;
    FOR k IN 1..coalesce(cardinality(v_n), 0) LOOP
        v_applied[v_n[k]] := v_a[k];
        v_origins := v_origins || v_b[k] || v_b[k];
        v_statuses := v_statuses || 'in_flight'::text || v_a[k];
        v_ns := v_ns || -1::bigint || 1::bigint;
    END LOOP;

    -- 2. Starts: reservations still current (in flight under their claim, no attempt
    -- started) and not expired are counted as attempts with a renewed lease and an attempt
    -- row; expired ones are failed; the rest were taken from this host meanwhile.
    WITH d AS MATERIALIZED (
        SELECT id, status, claim_seq, expires_at, origin FROM deliveries
        WHERE id = ANY (p_next_id) FOR UPDATE
    )
    SELECT array_agg(s.n::int),
        array_agg(CASE
            WHEN d.id IS NULL OR d.status <> 'in_flight' OR d.claim_seq <> s.claim_seq
                OR EXISTS (SELECT 1 FROM attempts t
                           WHERE t.delivery_id = s.id AND t.seq = s.claim_seq)
                THEN 'not_current'
            WHEN d.expires_at IS NOT NULL AND d.expires_at <= v_now THEN 'expired'
            ELSE 'started' END),
        array_agg(d.origin)
    INTO v_n, v_a, v_b
    FROM unnest(p_next_id, p_next_claim_seq) WITH ORDINALITY AS s (id, claim_seq, n)
    LEFT JOIN d ON d.id = s.id
    WHERE s.id IS NOT NULL;
    FOR k IN 1..coalesce(cardinality(v_n), 0) LOOP
        v_outcome[v_n[k]] := v_a[k];
        IF v_a[k] = 'started' THEN
            v_started := v_started || p_next_id[v_n[k]];
        ELSIF v_a[k] = 'expired' THEN
            PERFORM spoold_expire(p_next_id[v_n[k]], 'in_flight', v_now);
            v_origins := v_origins || v_b[k] || v_b[k];
            v_statuses := v_statuses || 'in_flight'::text || 'failed'::text;
            v_ns := v_ns || -1::bigint || 1::bigint;
        END IF;
    END LOOP;
    IF cardinality(v_started) > 0 THEN
        WITH st AS (
            UPDATE deliveries d SET attempts = d.attempts + 1, lease_until = v_now + p_lease_ms
            WHERE d.id = ANY (v_started)
            RETURNING d.id, d.claim_seq, d.cycle, d.attempts
        )
        INSERT INTO attempts (delivery_id, seq, cycle, number, started_at)
        SELECT id, claim_seq, cycle, attempts, v_now FROM st;
    END IF;

    -- 3. Reservations, per origin: as many of its oldest due deliveries as elements ask for it,
    -- each in flight under a new claim, no attempt started. Rows another transaction holds are
    -- skipped; expired ones met on the way are failed (at most 64 looked at per origin). The
    -- seek starts at the earliest `p_from` of the origin's elements (where this host's last
    -- reservation for it was due; see steps.sql for why), and from the start when nothing is
    -- due from there or an element asks for it (NULL).
    FOR v_origin, v_elems, v_from IN
        SELECT o.origin, array_agg(o.n::int ORDER BY o.n), min(COALESCE(o.from_due, v_start))
        FROM unnest(p_origin, p_from) WITH ORDINALITY AS o (origin, from_due, n)
        WHERE o.origin IS NOT NULL
        GROUP BY o.origin
    LOOP
        v_got := 0;
        v_looked := 0;
        WHILE v_got < cardinality(v_elems) AND v_looked < 64 LOOP
            v_want := cardinality(v_elems) - v_got;
            SELECT count(*)::int,
                array_agg(c.id ORDER BY c.next_attempt_at, c.id)
                    FILTER (WHERE c.expires_at IS NULL OR c.expires_at > v_now),
                array_agg(c.id) FILTER (WHERE c.expires_at <= v_now)
            INTO v_seen, v_ids, v_expired_ids
            FROM (SELECT id, expires_at, next_attempt_at FROM deliveries
                  WHERE status = 'pending' AND origin = v_origin
                      AND next_attempt_at >= v_from AND next_attempt_at <= v_now
                  ORDER BY next_attempt_at, id LIMIT v_want FOR UPDATE SKIP LOCKED) c;
            v_looked := v_looked + v_seen;
            IF v_expired_ids IS NOT NULL THEN
                WITH x AS (
                    UPDATE deliveries d SET status = 'failed', last_error_code = 'expired',
                        last_error = 'expired before the next attempt could start',
                        next_attempt_at = NULL, lease_until = NULL, updated_at = v_now,
                        log_seq = d.log_seq + 1
                    WHERE d.id = ANY (v_expired_ids)
                    RETURNING d.id, d.log_seq, d.attempts
                )
                INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at,
                    reason)
                SELECT id, log_seq, 'pending', 'failed', attempts, v_now, 'expired' FROM x;
                FOR k IN 1..cardinality(v_expired_ids) LOOP
                    v_origins := v_origins || v_origin || v_origin;
                    v_statuses := v_statuses || 'pending'::text || 'failed'::text;
                    v_ns := v_ns || -1::bigint || 1::bigint;
                END LOOP;
            END IF;
            IF v_ids IS NOT NULL THEN
                WITH rv AS (
                    UPDATE deliveries d SET status = 'in_flight', claim_seq = d.claim_seq + 1,
                        lease_until = v_now + p_lease_ms, updated_at = v_now,
                        log_seq = d.log_seq + 1
                    WHERE d.id = ANY (v_ids)
                    RETURNING d.id, d.claim_seq, d.log_seq, d.attempts, d.next_attempt_at
                ), l AS (
                    INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt,
                        at, reason)
                    SELECT id, log_seq, 'pending', 'in_flight', attempts, v_now, 'reserved'
                    FROM rv
                )
                SELECT array_agg(id ORDER BY next_attempt_at, id),
                    array_agg(claim_seq ORDER BY next_attempt_at, id),
                    array_agg(next_attempt_at ORDER BY next_attempt_at, id)
                INTO v_ids, v_claims, v_dues FROM rv;
                FOR k IN 1..cardinality(v_ids) LOOP
                    v_got := v_got + 1;
                    v_res_id[v_elems[v_got]] := v_ids[k];
                    v_res_claim[v_elems[v_got]] := v_claims[k];
                    v_res_due[v_elems[v_got]] := v_dues[k];
                    v_origins := v_origins || v_origin || v_origin;
                    v_statuses := v_statuses || 'pending'::text || 'in_flight'::text;
                    v_ns := v_ns || -1::bigint || 1::bigint;
                END LOOP;
            END IF;
            IF v_seen = 0 THEN
                -- Nothing (more) due from v_from on: once more from the start, then done.
                EXIT WHEN v_from = v_start;
                v_from := v_start;
            END IF;
        END LOOP;
    END LOOP;

    -- A reservation and the result recorded after it cancel out on `in_flight`: a busy slot's
    -- delivery usually adds nothing here but -1 pending and +1 succeeded, for the whole batch.
    INSERT INTO delivery_count_deltas (origin, status, n)
    SELECT o, st, sum(n) FROM unnest(v_origins, v_statuses, v_ns) AS c (o, st, n)
    GROUP BY o, st HAVING sum(n) <> 0;
    PERFORM set_config('spoold.counting', '', true);

    RETURN QUERY
    SELECT g.n, v_applied[g.n], v_outcome[g.n], v_now, d.attempts, d.cycle, d.target_url,
        d.method, d.headers, d.body_kind, d.body, d.mode, d.remote_id_pointer,
        v_res_id[g.n], v_res_claim[g.n], v_res_due[g.n]
    FROM generate_series(1, v_len) AS g (n)
    LEFT JOIN (SELECT * FROM deliveries WHERE id = ANY (v_started)) d
        ON d.id = p_next_id[g.n] AND v_outcome[g.n] = 'started'
    ORDER BY g.n;
END $$;

-- spoold's PostgreSQL schema, version 2: the three steps every delivery takes on its way
-- through a busy target's slot — reserve the next, start it, record a result — as functions,
-- so that each step is one statement, and a slot's result, next start and next reservation
-- one statement together (`spoold_advance`: one transaction, one round trip, one commit)
-- instead of three transactions of some twenty statements. Same rules as the Rust they
-- replace: every status change bumps `log_seq` and appends to `transitions`; fenced changes
-- check the claim on the row as the last committed change left it; times are read from the
-- database's clock, in milliseconds.

-- A start, and a lease renewal, change only columns no index reads (`attempts`, `lease_until`;
-- `updated_at` stays the time of the last status change), so PostgreSQL can write the new row
-- version in place (HOT, on a page with room left: hence the fill factor) instead of adding an
-- entry to every index. In-flight claims are few (the hosts' concurrency): the lease sweep
-- reads them all and checks each lease.
DROP INDEX deliveries_lease;
CREATE INDEX deliveries_in_flight ON deliveries (id) WHERE status = 'in_flight';
ALTER TABLE deliveries SET (fillfactor = 85);

CREATE FUNCTION spoold_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- Fail a delivery as `expired`. The caller holds the row's lock and has checked its status.
CREATE FUNCTION spoold_expire(p_id TEXT, p_from TEXT, p_now BIGINT) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    v_seq BIGINT;
    v_attempts BIGINT;
BEGIN
    UPDATE deliveries SET status = 'failed', last_error_code = 'expired',
        last_error = 'expired before the next attempt could start', next_attempt_at = NULL,
        lease_until = NULL, updated_at = p_now, log_seq = log_seq + 1
    WHERE id = p_id
    RETURNING log_seq, attempts INTO v_seq, v_attempts;
    INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at, reason, note)
    VALUES (p_id, v_seq, p_from, 'failed', v_attempts, p_now, 'expired', NULL);
END $$;

-- Reserve the oldest due delivery of an origin (expired ones met on the way are failed, at most
-- 64 of them): in flight under a new claim, no attempt started. Rows another transaction holds
-- are skipped. No row when there is nothing to reserve.
--
-- `p_from`, if not NULL, is where to start looking: the due time of the last delivery this host
-- reserved for the origin. The entries before it in `deliveries_origin_due` are mostly those of
-- deliveries taken since the last vacuum — dead, yet walked over by every seek from the start
-- (hundreds of index pages per reservation under load). Due work before `p_from` (a create that
-- committed late, a reservation given back) is found when nothing is due from `p_from` on, and
-- by the caller's periodic seek from the start (NULL).
CREATE FUNCTION spoold_reserve(p_origin TEXT, p_lease_ms BIGINT, p_from BIGINT,
    OUT o_id TEXT, OUT o_claim_seq BIGINT, OUT o_due BIGINT)
RETURNS SETOF RECORD LANGUAGE plpgsql AS $$
DECLARE
    v_now BIGINT := spoold_now_ms();
    v_from BIGINT := COALESCE(p_from, -9223372036854775808);
    v_expires BIGINT;
    v_seq BIGINT;
    v_attempts BIGINT;
BEGIN
    FOR i IN 1..64 LOOP
        SELECT id, expires_at, next_attempt_at INTO o_id, v_expires, o_due FROM deliveries
        WHERE status = 'pending' AND origin = p_origin
            AND next_attempt_at >= v_from AND next_attempt_at <= v_now
        ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF v_from = -9223372036854775808 THEN
                RETURN;
            END IF;
            v_from := -9223372036854775808;
            CONTINUE;
        END IF;
        IF v_expires IS NOT NULL AND v_expires <= v_now THEN
            PERFORM spoold_expire(o_id, 'pending', v_now);
            CONTINUE;
        END IF;
        UPDATE deliveries SET status = 'in_flight', claim_seq = claim_seq + 1,
            lease_until = v_now + p_lease_ms, updated_at = v_now, log_seq = log_seq + 1
        WHERE id = o_id AND status = 'pending'
        RETURNING claim_seq, log_seq, attempts INTO o_claim_seq, v_seq, v_attempts;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at, reason)
        VALUES (o_id, v_seq, 'pending', 'in_flight', v_attempts, v_now, 'reserved');
        RETURN NEXT;
        RETURN;
    END LOOP;
END $$;

-- Start the attempt of a reservation if it is still current (in flight under this claim, its
-- attempt not started) and not expired: count the attempt, renew the lease, write the attempt
-- row. `o_outcome` is 'started' (with the request), 'not_current' or 'expired'.
CREATE FUNCTION spoold_start(p_id TEXT, p_claim_seq BIGINT, p_lease_ms BIGINT,
    OUT o_outcome TEXT, OUT o_now BIGINT, OUT o_attempts BIGINT, OUT o_cycle BIGINT,
    OUT o_target_url TEXT, OUT o_method TEXT, OUT o_headers TEXT, OUT o_body_kind BIGINT,
    OUT o_body BYTEA, OUT o_mode TEXT, OUT o_remote_id_pointer TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_status TEXT;
    v_claim_seq BIGINT;
    v_expires BIGINT;
BEGIN
    o_now := spoold_now_ms();
    -- The common case in one statement: it waits for a concurrent change of the row (a
    -- cancel, a take-back) and checks the conditions again on what that committed.
    UPDATE deliveries SET attempts = attempts + 1, lease_until = o_now + p_lease_ms
    WHERE id = p_id AND status = 'in_flight' AND claim_seq = p_claim_seq
        AND (expires_at IS NULL OR expires_at > o_now)
        AND NOT EXISTS (SELECT 1 FROM attempts WHERE delivery_id = p_id AND seq = p_claim_seq)
    RETURNING attempts, cycle, target_url, method, headers, body_kind, body, mode,
        remote_id_pointer
    INTO o_attempts, o_cycle, o_target_url, o_method, o_headers, o_body_kind, o_body, o_mode,
        o_remote_id_pointer;
    IF FOUND THEN
        INSERT INTO attempts (delivery_id, seq, cycle, number, started_at)
        VALUES (p_id, p_claim_seq, o_cycle, o_attempts, o_now);
        o_outcome := 'started';
        RETURN;
    END IF;
    -- Not started: find out why, under the row's lock.
    SELECT status, claim_seq, expires_at INTO v_status, v_claim_seq, v_expires
    FROM deliveries WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR v_status <> 'in_flight' OR v_claim_seq <> p_claim_seq
        OR EXISTS (SELECT 1 FROM attempts WHERE delivery_id = p_id AND seq = p_claim_seq)
        OR v_expires IS NULL OR v_expires > o_now THEN
        o_outcome := 'not_current';
        RETURN;
    END IF;
    PERFORM spoold_expire(p_id, 'in_flight', o_now);
    o_outcome := 'expired';
END $$;

-- Record an attempt's outcome (always, on its attempt row) and apply it to the delivery while
-- the claim is current (in flight under `p_claim_seq`). Returns the delivery's new status, or
-- NULL when the claim was no longer current (fenced: only the attempt row changed).
-- `p_disposition` is 'succeeded', 'retry' (after `p_delay_ms`), 'failed', 'interrupted' (not
-- charged, due at once) or 'unknown' (first check after `p_check_in_ms`).
CREATE FUNCTION spoold_complete(p_id TEXT, p_claim_seq BIGINT, p_disposition TEXT,
    p_delay_ms BIGINT, p_check_in_ms BIGINT, p_http_status BIGINT, p_error_code TEXT,
    p_error TEXT, p_duration_ms BIGINT, p_remote_id TEXT, p_default_window_ms BIGINT)
RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    v_now BIGINT := spoold_now_ms();
    v_new TEXT;
    v_seq BIGINT;
    v_attempts BIGINT;
    v_reason TEXT;
    v_note TEXT;
BEGIN
    -- One statement decides and applies: it waits for a concurrent change of the row (a
    -- cancel, a take-back by another host) and checks the claim again on what that committed.
    -- Every expression on the right reads the row as it was. A retry that used the last
    -- allowed attempt ends the delivery; a retry waits no longer than the deadline (the claim
    -- then fails it as expired); entering `unknown` starts its clock (first check, window).
    UPDATE deliveries SET
        status = CASE p_disposition
            WHEN 'retry' THEN CASE WHEN greatest(attempts - uncharged, 0) >= max_attempts
                              THEN 'failed' ELSE 'pending' END
            WHEN 'interrupted' THEN 'pending'
            ELSE p_disposition END,
        next_attempt_at = CASE p_disposition
            WHEN 'retry' THEN CASE WHEN greatest(attempts - uncharged, 0) >= max_attempts
                              THEN NULL
                              ELSE least(v_now + greatest(p_delay_ms, 0), expires_at) END
            WHEN 'interrupted' THEN v_now
            ELSE NULL END,
        uncharged = uncharged + CASE WHEN p_disposition = 'interrupted' THEN 1 ELSE 0 END,
        last_error = CASE WHEN p_disposition = 'succeeded' THEN NULL ELSE p_error END,
        last_error_code = CASE WHEN p_disposition = 'succeeded' THEN NULL ELSE p_error_code END,
        last_response_code = COALESCE(p_http_status, last_response_code), lease_until = NULL,
        updated_at = v_now, log_seq = log_seq + 1, remote_id = COALESCE(p_remote_id, remote_id),
        unknown_since = CASE WHEN p_disposition = 'unknown' THEN v_now ELSE unknown_since END,
        check_at = CASE WHEN p_disposition = 'unknown'
                   THEN v_now + greatest(p_check_in_ms, 0) END,
        review_at = CASE WHEN p_disposition = 'unknown'
                    THEN v_now + COALESCE(window_ms, p_default_window_ms) ELSE review_at END
    WHERE id = p_id AND status = 'in_flight' AND claim_seq = p_claim_seq
    RETURNING status, log_seq, attempts INTO v_new, v_seq, v_attempts;
    UPDATE attempts SET finished_at = v_now,
        outcome = CASE WHEN p_disposition = 'retry' AND v_new = 'failed' THEN 'failed'
                  ELSE p_disposition END,
        http_status = p_http_status, error_code = p_error_code, error = p_error,
        duration_ms = p_duration_ms
    WHERE delivery_id = p_id AND seq = p_claim_seq AND outcome IS NULL;
    IF v_new IS NULL THEN
        RETURN NULL;
    END IF;
    v_reason := CASE
        WHEN p_disposition = 'succeeded' THEN 'delivered'
        WHEN p_error_code IS NOT NULL THEN p_error_code
        WHEN p_disposition = 'failed' THEN 'failed'
        WHEN p_disposition = 'unknown' THEN 'unknown'
        ELSE 'retry' END;
    v_note := CASE
        WHEN v_new = 'failed' AND p_disposition = 'retry' THEN 'no attempts left'
        WHEN v_new = 'unknown' THEN 'the request may have reached the target; not resent' END;
    INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at, reason, note)
    VALUES (p_id, v_seq, 'in_flight', v_new, v_attempts, v_now, v_reason, v_note);
    RETURN v_new;
END $$;

-- The three steps of a slot whose target has answered, in one statement: record `p_id`'s
-- result (as spoold_complete), start the reserved `p_next_id` (as spoold_start) and reserve the
-- one after it for the same origin (as spoold_reserve). Run as one implicit transaction, the
-- server answers once all three have committed.
CREATE FUNCTION spoold_advance(p_id TEXT, p_claim_seq BIGINT, p_disposition TEXT,
    p_delay_ms BIGINT, p_check_in_ms BIGINT, p_http_status BIGINT, p_error_code TEXT,
    p_error TEXT, p_duration_ms BIGINT, p_remote_id TEXT, p_default_window_ms BIGINT,
    p_next_id TEXT, p_next_claim_seq BIGINT, p_origin TEXT, p_lease_ms BIGINT, p_from BIGINT,
    OUT o_applied TEXT,
    OUT o_outcome TEXT, OUT o_now BIGINT, OUT o_attempts BIGINT, OUT o_cycle BIGINT,
    OUT o_target_url TEXT, OUT o_method TEXT, OUT o_headers TEXT, OUT o_body_kind BIGINT,
    OUT o_body BYTEA, OUT o_mode TEXT, OUT o_remote_id_pointer TEXT,
    OUT o_id TEXT, OUT o_claim_seq BIGINT, OUT o_due BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    o_applied := spoold_complete(p_id, p_claim_seq, p_disposition, p_delay_ms, p_check_in_ms,
        p_http_status, p_error_code, p_error, p_duration_ms, p_remote_id, p_default_window_ms);
    SELECT * INTO o_outcome, o_now, o_attempts, o_cycle, o_target_url, o_method, o_headers,
        o_body_kind, o_body, o_mode, o_remote_id_pointer
    FROM spoold_start(p_next_id, p_next_claim_seq, p_lease_ms);
    SELECT * INTO o_id, o_claim_seq, o_due FROM spoold_reserve(p_origin, p_lease_ms, p_from);
END $$;

-- Counted as before (schema.sql), with one statement per change instead of two.
CREATE OR REPLACE FUNCTION spoold_count_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO delivery_count_deltas (origin, status, n)
        VALUES (OLD.origin, OLD.status, -1), (NEW.origin, NEW.status, 1);
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO delivery_count_deltas (origin, status, n) VALUES (NEW.origin, NEW.status, 1);
    ELSE
        INSERT INTO delivery_count_deltas (origin, status, n) VALUES (OLD.origin, OLD.status, -1);
    END IF;
    RETURN NULL;
END $$;

-- spoold's PostgreSQL schema, version 2: the three steps every delivery takes on its way
-- through a busy target's slot — reserve the next, start it, record a result — as functions,
-- so that each step is one statement and a slot's result, next start and next reservation
-- travel to the server together in one transaction (one round trip, one commit) instead of
-- some twenty statements. Same rules as the Rust they replace: every status change bumps
-- `log_seq` and appends to `transitions`; fenced steps lock their row first; times are read
-- from the database's clock, in milliseconds.

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
    SELECT status, claim_seq, expires_at INTO v_status, v_claim_seq, v_expires
    FROM deliveries WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR v_status <> 'in_flight' OR v_claim_seq <> p_claim_seq
        OR EXISTS (SELECT 1 FROM attempts WHERE delivery_id = p_id AND seq = p_claim_seq) THEN
        o_outcome := 'not_current';
        RETURN;
    END IF;
    IF v_expires IS NOT NULL AND v_expires <= o_now THEN
        PERFORM spoold_expire(p_id, 'in_flight', o_now);
        o_outcome := 'expired';
        RETURN;
    END IF;
    UPDATE deliveries SET attempts = attempts + 1, lease_until = o_now + p_lease_ms,
        updated_at = o_now
    WHERE id = p_id
    RETURNING attempts, cycle, target_url, method, headers, body_kind, body, mode,
        remote_id_pointer
    INTO o_attempts, o_cycle, o_target_url, o_method, o_headers, o_body_kind, o_body, o_mode,
        o_remote_id_pointer;
    INSERT INTO attempts (delivery_id, seq, cycle, number, started_at)
    VALUES (p_id, p_claim_seq, o_cycle, o_attempts, o_now);
    o_outcome := 'started';
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
    v_status TEXT;
    v_claim_seq BIGINT;
    v_attempts BIGINT;
    v_uncharged BIGINT;
    v_max_attempts BIGINT;
    v_expires BIGINT;
    v_current BOOLEAN;
    v_exhausted BOOLEAN;
    v_new TEXT;
    v_next BIGINT;
    v_unknown_since BIGINT;
    v_check_at BIGINT;
    v_seq BIGINT;
    v_reason TEXT;
    v_note TEXT;
BEGIN
    -- Locked: a cancel or a reclaim by another host waits for this result, or this one for it.
    SELECT status, claim_seq, attempts, uncharged, max_attempts, expires_at
    INTO v_status, v_claim_seq, v_attempts, v_uncharged, v_max_attempts, v_expires
    FROM deliveries WHERE id = p_id FOR UPDATE;
    v_current := FOUND AND v_status = 'in_flight' AND v_claim_seq = p_claim_seq;
    v_exhausted := v_current AND greatest(v_attempts - v_uncharged, 0) >= v_max_attempts;
    UPDATE attempts SET finished_at = v_now,
        outcome = CASE
            WHEN p_disposition = 'retry' AND v_exhausted THEN 'failed'
            ELSE p_disposition END,
        http_status = p_http_status, error_code = p_error_code, error = p_error,
        duration_ms = p_duration_ms
    WHERE delivery_id = p_id AND seq = p_claim_seq AND outcome IS NULL;
    IF NOT v_current THEN
        RETURN NULL;
    END IF;
    CASE p_disposition
        WHEN 'succeeded' THEN
            v_new := 'succeeded';
        WHEN 'failed' THEN
            v_new := 'failed';
        WHEN 'interrupted' THEN
            v_new := 'pending';
            v_next := v_now;
            v_uncharged := v_uncharged + 1;
        WHEN 'unknown' THEN
            -- Entering `unknown` starts its clock: the first check, and the end of the window.
            v_new := 'unknown';
            v_unknown_since := v_now;
            v_check_at := v_now + greatest(p_check_in_ms, 0);
        WHEN 'retry' THEN
            IF v_exhausted THEN
                v_new := 'failed';
            ELSE
                v_new := 'pending';
                -- Wake at the deadline at the latest; the claim then fails it as expired.
                v_next := least(v_now + greatest(p_delay_ms, 0), v_expires);
            END IF;
    END CASE;
    UPDATE deliveries SET status = v_new, next_attempt_at = v_next, uncharged = v_uncharged,
        last_error = CASE WHEN p_disposition = 'succeeded' THEN NULL ELSE p_error END,
        last_error_code = CASE WHEN p_disposition = 'succeeded' THEN NULL ELSE p_error_code END,
        last_response_code = COALESCE(p_http_status, last_response_code), lease_until = NULL,
        updated_at = v_now, log_seq = log_seq + 1, remote_id = COALESCE(p_remote_id, remote_id),
        unknown_since = COALESCE(v_unknown_since, unknown_since), check_at = v_check_at,
        review_at = CASE WHEN v_unknown_since IS NULL THEN review_at
                    ELSE v_unknown_since + COALESCE(window_ms, p_default_window_ms) END
    WHERE id = p_id
    RETURNING log_seq, attempts INTO v_seq, v_attempts;
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

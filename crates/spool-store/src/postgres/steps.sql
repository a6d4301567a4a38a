-- spoold's PostgreSQL schema, version 2: the steps every delivery takes through a busy
-- target's slot — reserve the next, start it, record a result — as one function
-- (`spoold_steps`), so that a slot's result, next start and next reservation are one statement
-- (one transaction, one round trip, one commit), and the steps of concurrent slots one
-- statement together, instead of three transactions of some twenty statements each. Same rules
-- as the Rust it replaces: every status change bumps `log_seq` and appends to `transitions`;
-- fenced changes check the claim on the row as the last committed change left it; times are
-- read from the database's clock, in milliseconds.

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

-- The steps of delivery slots, one per element of the arrays (all of one length), in order,
-- each one row of the result (`o_n`, from 1). A step does up to three things, each skipped when
-- its first argument is NULL:
--
-- 1. Record the result of claim `p_claim_seq` of `p_id` (the `o_applied` column): always on
--    its attempt row, and on the delivery while the claim is current (in flight under that
--    claim). `o_applied` is the new status, NULL when the claim was no longer current (fenced).
--    `p_disposition` is 'succeeded', 'retry' (after `p_delay_ms`), 'failed', 'interrupted'
--    (not charged, due at once) or 'unknown' (first check after `p_check_in_ms`).
-- 2. Start the attempt of the reservation `p_next_id` under `p_next_claim_seq` if it is still
--    current (its attempt not started) and not expired: count the attempt, renew the lease,
--    write the attempt row. `o_outcome` is 'started' (with the request in the `o_*` columns),
--    'not_current' or 'expired'.
-- 3. Reserve the oldest due delivery of `p_origin` (`o_id`, `o_claim_seq`, `o_due`; NULL when
--    none): in flight under a new claim, no attempt started. Rows another transaction holds
--    are skipped; expired ones met on the way are failed (at most 64 looked at). `p_from`, if
--    not NULL, is where to start looking: the due time of the last delivery this host
--    reserved for the origin. The entries before it in `deliveries_origin_due` are mostly those
--    of deliveries taken since the last vacuum — dead, yet walked over by every seek from the
--    start (hundreds of index pages per reservation under load). Due work before `p_from` (a
--    create that committed late, a reservation given back) is found when nothing is due from
--    `p_from` on, and by the caller's periodic seek from the start (NULL).
--
-- A slot whose target answered takes all three at once (record, start the next, reserve the
-- one after); concurrent slots' steps are written together (group commit). Fenced writes decide
-- in the UPDATE's own WHERE, which PostgreSQL checks again on a row version a concurrent
-- transaction (a cancel, another host's take-back) committed meanwhile.
CREATE FUNCTION spoold_steps(p_id TEXT[], p_claim_seq BIGINT[], p_disposition TEXT[],
    p_delay_ms BIGINT[], p_check_in_ms BIGINT[], p_http_status BIGINT[], p_error_code TEXT[],
    p_error TEXT[], p_duration_ms BIGINT[], p_remote_id TEXT[], p_default_window_ms BIGINT,
    p_next_id TEXT[], p_next_claim_seq BIGINT[], p_origin TEXT[], p_lease_ms BIGINT,
    p_from BIGINT[],
    OUT o_n INT, OUT o_applied TEXT,
    OUT o_outcome TEXT, OUT o_now BIGINT, OUT o_attempts BIGINT, OUT o_cycle BIGINT,
    OUT o_target_url TEXT, OUT o_method TEXT, OUT o_headers TEXT, OUT o_body_kind BIGINT,
    OUT o_body BYTEA, OUT o_mode TEXT, OUT o_remote_id_pointer TEXT,
    OUT o_id TEXT, OUT o_claim_seq BIGINT, OUT o_due BIGINT)
RETURNS SETOF RECORD LANGUAGE plpgsql AS $$
DECLARE
    v_start CONSTANT BIGINT := -9223372036854775808;
    v_new TEXT;
    v_seq BIGINT;
    v_attempts BIGINT;
    v_status TEXT;
    v_claim_seq BIGINT;
    v_expires BIGINT;
    v_from BIGINT;
    v_origin TEXT;
    -- Count changes of this call: (origin, status, +1/-1), written as one net delta at the end.
    v_origins TEXT[] := '{}';
    v_statuses TEXT[] := '{}';
    v_ns BIGINT[] := '{}';
BEGIN
    -- This call counts its own status changes (see the trigger below).
    PERFORM set_config('spoold.counting', 'steps', true);
    FOR i IN 1..coalesce(cardinality(p_id), 0) LOOP
        o_n := i;
        o_now := spoold_now_ms();
        o_applied := NULL;
        o_outcome := NULL;
        o_id := NULL;
        o_claim_seq := NULL;
        o_due := NULL;

        IF p_id[i] IS NOT NULL THEN
            -- Every expression on the right reads the row as it was. A retry that used the
            -- last allowed attempt ends the delivery; a retry waits no longer than the deadline
            -- (the claim then fails it as expired); entering `unknown` starts its clock (first
            -- check, end of the window).
            UPDATE deliveries SET
                status = CASE p_disposition[i]
                    WHEN 'retry' THEN CASE WHEN greatest(attempts - uncharged, 0) >= max_attempts
                                      THEN 'failed' ELSE 'pending' END
                    WHEN 'interrupted' THEN 'pending'
                    ELSE p_disposition[i] END,
                next_attempt_at = CASE p_disposition[i]
                    WHEN 'retry' THEN CASE WHEN greatest(attempts - uncharged, 0) >= max_attempts
                                      THEN NULL
                                      ELSE least(o_now + greatest(p_delay_ms[i], 0), expires_at)
                                      END
                    WHEN 'interrupted' THEN o_now
                    ELSE NULL END,
                uncharged = uncharged + CASE WHEN p_disposition[i] = 'interrupted' THEN 1 ELSE 0 END,
                last_error = CASE WHEN p_disposition[i] = 'succeeded' THEN NULL ELSE p_error[i] END,
                last_error_code = CASE WHEN p_disposition[i] = 'succeeded' THEN NULL
                                  ELSE p_error_code[i] END,
                last_response_code = COALESCE(p_http_status[i], last_response_code),
                lease_until = NULL, updated_at = o_now, log_seq = log_seq + 1,
                remote_id = COALESCE(p_remote_id[i], remote_id),
                unknown_since = CASE WHEN p_disposition[i] = 'unknown' THEN o_now
                                ELSE unknown_since END,
                check_at = CASE WHEN p_disposition[i] = 'unknown'
                           THEN o_now + greatest(p_check_in_ms[i], 0) END,
                review_at = CASE WHEN p_disposition[i] = 'unknown'
                            THEN o_now + COALESCE(window_ms, p_default_window_ms)
                            ELSE review_at END
            WHERE id = p_id[i] AND status = 'in_flight' AND claim_seq = p_claim_seq[i]
            RETURNING status, log_seq, attempts, origin INTO v_new, v_seq, v_attempts, v_origin;
            UPDATE attempts SET finished_at = o_now,
                outcome = CASE WHEN p_disposition[i] = 'retry' AND v_new = 'failed' THEN 'failed'
                          ELSE p_disposition[i] END,
                http_status = p_http_status[i], error_code = p_error_code[i],
                error = p_error[i], duration_ms = p_duration_ms[i]
            WHERE delivery_id = p_id[i] AND seq = p_claim_seq[i] AND outcome IS NULL;
            IF v_new IS NOT NULL THEN
                v_origins := v_origins || v_origin || v_origin;
                v_statuses := v_statuses || 'in_flight'::text || v_new;
                v_ns := v_ns || -1::bigint || 1::bigint;
                INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at,
                    reason, note)
                VALUES (p_id[i], v_seq, 'in_flight', v_new, v_attempts, o_now,
                    CASE
                        WHEN p_disposition[i] = 'succeeded' THEN 'delivered'
                        WHEN p_error_code[i] IS NOT NULL THEN p_error_code[i]
                        WHEN p_disposition[i] = 'failed' THEN 'failed'
                        WHEN p_disposition[i] = 'unknown' THEN 'unknown'
                        ELSE 'retry' END,
                    CASE
                        WHEN v_new = 'failed' AND p_disposition[i] = 'retry'
                            THEN 'no attempts left'
                        WHEN v_new = 'unknown'
                            THEN 'the request may have reached the target; not resent' END);
            END IF;
            o_applied := v_new;
        END IF;

        IF p_next_id[i] IS NOT NULL THEN
            UPDATE deliveries SET attempts = attempts + 1, lease_until = o_now + p_lease_ms
            WHERE id = p_next_id[i] AND status = 'in_flight' AND claim_seq = p_next_claim_seq[i]
                AND (expires_at IS NULL OR expires_at > o_now)
                AND NOT EXISTS (SELECT 1 FROM attempts
                                WHERE delivery_id = p_next_id[i] AND seq = p_next_claim_seq[i])
            RETURNING attempts, cycle, target_url, method, headers, body_kind, body, mode,
                remote_id_pointer
            INTO o_attempts, o_cycle, o_target_url, o_method, o_headers, o_body_kind, o_body,
                o_mode, o_remote_id_pointer;
            IF FOUND THEN
                INSERT INTO attempts (delivery_id, seq, cycle, number, started_at)
                VALUES (p_next_id[i], p_next_claim_seq[i], o_cycle, o_attempts, o_now);
                o_outcome := 'started';
            ELSE
                -- Not started: find out why, under the row's lock.
                SELECT status, claim_seq, expires_at, origin
                INTO v_status, v_claim_seq, v_expires, v_origin
                FROM deliveries WHERE id = p_next_id[i] FOR UPDATE;
                IF NOT FOUND OR v_status <> 'in_flight' OR v_claim_seq <> p_next_claim_seq[i]
                    OR EXISTS (SELECT 1 FROM attempts
                               WHERE delivery_id = p_next_id[i] AND seq = p_next_claim_seq[i])
                    OR v_expires IS NULL OR v_expires > o_now THEN
                    o_outcome := 'not_current';
                ELSE
                    PERFORM spoold_expire(p_next_id[i], 'in_flight', o_now);
                    v_origins := v_origins || v_origin || v_origin;
                    v_statuses := v_statuses || 'in_flight'::text || 'failed'::text;
                    v_ns := v_ns || -1::bigint || 1::bigint;
                    o_outcome := 'expired';
                END IF;
            END IF;
        END IF;

        IF p_origin[i] IS NOT NULL THEN
            v_from := COALESCE(p_from[i], v_start);
            FOR k IN 1..64 LOOP
                SELECT id, expires_at, next_attempt_at INTO o_id, v_expires, o_due
                FROM deliveries
                WHERE status = 'pending' AND origin = p_origin[i]
                    AND next_attempt_at >= v_from AND next_attempt_at <= o_now
                ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    o_id := NULL;
                    o_due := NULL;
                    EXIT WHEN v_from = v_start;
                    v_from := v_start;
                    CONTINUE;
                END IF;
                IF v_expires IS NOT NULL AND v_expires <= o_now THEN
                    PERFORM spoold_expire(o_id, 'pending', o_now);
                    v_origins := v_origins || p_origin[i] || p_origin[i];
                    v_statuses := v_statuses || 'pending'::text || 'failed'::text;
                    v_ns := v_ns || -1::bigint || 1::bigint;
                    o_id := NULL;
                    o_due := NULL;
                    CONTINUE;
                END IF;
                UPDATE deliveries SET status = 'in_flight', claim_seq = claim_seq + 1,
                    lease_until = o_now + p_lease_ms, updated_at = o_now, log_seq = log_seq + 1
                WHERE id = o_id AND status = 'pending'
                RETURNING claim_seq, log_seq, attempts INTO o_claim_seq, v_seq, v_attempts;
                IF NOT FOUND THEN
                    o_id := NULL;
                    o_due := NULL;
                    CONTINUE;
                END IF;
                INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at,
                    reason)
                VALUES (o_id, v_seq, 'pending', 'in_flight', v_attempts, o_now, 'reserved');
                v_origins := v_origins || p_origin[i] || p_origin[i];
                v_statuses := v_statuses || 'pending'::text || 'in_flight'::text;
                v_ns := v_ns || -1::bigint || 1::bigint;
                EXIT;
            END LOOP;
        END IF;

        RETURN NEXT;
    END LOOP;
    -- A reservation and the result recorded after it cancel out on `in_flight`: a busy slot's
    -- delivery usually adds nothing here but -1 pending and +1 succeeded, for the whole batch.
    INSERT INTO delivery_count_deltas (origin, status, n)
    SELECT o, st, sum(n) FROM unnest(v_origins, v_statuses, v_ns) AS c (o, st, n)
    GROUP BY o, st HAVING sum(n) <> 0;
    PERFORM set_config('spoold.counting', '', true);
END $$;

-- Counted as before (schema.sql), with one statement per change instead of two; changes made
-- by `spoold_steps` are counted by it, once per call, and skipped here. The setting it raises
-- is local to its transaction and lowered before it returns, so statements after it in the
-- same transaction are counted here again.
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
DROP TRIGGER deliveries_counted_moved ON deliveries;
CREATE TRIGGER deliveries_counted_moved AFTER UPDATE OF status ON deliveries
    FOR EACH ROW WHEN (OLD.status <> NEW.status
        AND current_setting('spoold.counting', true) IS DISTINCT FROM 'steps')
    EXECUTE FUNCTION spoold_count_delivery();

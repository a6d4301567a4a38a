-- `spoold_steps`: the steps every delivery takes through a busy target's slot — reserve the
-- next, start it, record a result — in one function, so that a slot's result, next start and
-- next reservation are one statement (one transaction, one round trip, one commit), and the
-- steps of concurrent slots one statement together. Same rules as the SQLite backend: every
-- status change bumps `log_seq` and appends to `transitions`; fenced changes check the claim on
-- the row as the last committed change left it; times are read from the database's clock, in
-- milliseconds.
--
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
--
-- `p_take[i]`: the reservation part (`p_origin[i]`) takes what it finds: an at-least-once
-- delivery is claimed with its attempt started (`o_outcome` 'started', its request in the
-- `o_*` columns, `claimed` in its history, as the scheduler's claims); an at-most-once one is
-- only reserved — its attempt is started when its turn comes, so that a crash never finds it
-- started and unsent. A step that takes starts no reservation (`p_next_id[i]` NULL).
--
-- Within one call, a step that reserves or takes for an origin starts looking where the call's
-- last step for that origin found its delivery, rather than each from the host's cursor
-- (`p_from`) as the call began. Each step of a batch used to walk again over the index entries
-- of what the steps before it took in the same call — and, with two hosts, over what the other
-- host took since this host's last take (`pg_stat_statements`: a take's seek read 35.5 buffers
-- with two hosts, 8.3 with one; docs/BENCHMARKS.md). A step that finds nothing past that point
-- looks again from the start, as before, so nothing is missed that a seek from the cursor would
-- find.
--
-- Few statements run per delivery — PostgreSQL pays an executor start-up (plan nodes, indexes
-- opened, expressions built) for every statement a function runs:
-- - the attempt rows it starts and the transitions it logs are collected in arrays and
--   inserted at the end, one statement each for the whole call (nothing in a call reads the
--   rows an earlier step of the same call would have inserted: a delivery reserved in a call is
--   started in a later one, a started one is recorded in a later one);
-- - a success, nearly every result, is recorded by a statement of its own whose expressions
--   are those of a success, not the general one's CASEs;
-- - arguments used more than once are read from their arrays once.
CREATE OR REPLACE FUNCTION spoold_steps(p_id TEXT[], p_claim_seq BIGINT[], p_disposition TEXT[],
    p_delay_ms BIGINT[], p_check_in_ms BIGINT[], p_http_status BIGINT[], p_error_code TEXT[],
    p_error TEXT[], p_duration_ms BIGINT[], p_remote_id TEXT[], p_default_window_ms BIGINT,
    p_next_id TEXT[], p_next_claim_seq BIGINT[], p_origin TEXT[], p_lease_ms BIGINT,
    p_from BIGINT[], p_take BOOLEAN[],
    OUT o_n INT, OUT o_applied TEXT,
    OUT o_outcome TEXT, OUT o_now BIGINT, OUT o_attempts BIGINT, OUT o_cycle BIGINT,
    OUT o_target_url TEXT, OUT o_method TEXT, OUT o_headers TEXT, OUT o_body_kind BIGINT,
    OUT o_body BYTEA, OUT o_mode TEXT, OUT o_remote_id_pointer TEXT, OUT o_sign_secret TEXT,
    OUT o_id TEXT, OUT o_claim_seq BIGINT, OUT o_due BIGINT)
RETURNS SETOF RECORD LANGUAGE plpgsql AS $$
DECLARE
    v_start CONSTANT BIGINT := -9223372036854775808;
    v_id TEXT;
    v_claim BIGINT;
    v_disposition TEXT;
    v_error_code TEXT;
    v_new TEXT;
    v_seq BIGINT;
    v_attempts BIGINT;
    v_status TEXT;
    v_claim_seq BIGINT;
    v_expires BIGINT;
    v_from BIGINT;
    v_origin TEXT;
    v_mode TEXT;
    v_take BOOLEAN;
    -- Where this call last found a delivery to reserve or take, and of which origin.
    v_found_origin TEXT;
    v_found_due BIGINT;
    -- Count changes of this call: (origin, status, +1/-1), written as one net delta at the end.
    v_origins TEXT[] := '{}';
    v_statuses TEXT[] := '{}';
    v_ns BIGINT[] := '{}';
    -- Rows for `attempts` and `transitions`, inserted at the end.
    v_started attempts[] := '{}';
    v_logged transitions[] := '{}';
BEGIN
    -- This call counts its own status changes (see `spoold_count_delivery`).
    PERFORM set_config('spoold.counting', 'steps', true);
    FOR i IN 1..coalesce(cardinality(p_id), 0) LOOP
        o_n := i;
        o_now := spoold_now_ms();
        o_applied := NULL;
        o_outcome := NULL;
        o_id := NULL;
        o_claim_seq := NULL;
        o_due := NULL;

        v_id := p_id[i];
        IF v_id IS NOT NULL THEN
            v_claim := p_claim_seq[i];
            v_disposition := p_disposition[i];
            v_error_code := p_error_code[i];
            IF v_disposition = 'succeeded' THEN
                UPDATE deliveries SET status = 'succeeded', next_attempt_at = NULL,
                    last_error = NULL, last_error_code = NULL,
                    last_response_code = COALESCE(p_http_status[i], last_response_code),
                    lease_until = NULL, updated_at = o_now, log_seq = log_seq + 1,
                    remote_id = COALESCE(p_remote_id[i], remote_id), check_at = NULL
                WHERE id = v_id AND status = 'in_flight' AND claim_seq = v_claim
                RETURNING status, log_seq, attempts, origin
                INTO v_new, v_seq, v_attempts, v_origin;
            ELSE
                -- Every expression on the right reads the row as it was. A retry that used
                -- the last allowed attempt ends the delivery; a retry waits no longer than the
                -- deadline (the claim then fails it as expired); entering `unknown` starts its
                -- clock (first check, end of the window).
                UPDATE deliveries SET
                    status = CASE v_disposition
                        WHEN 'retry' THEN
                            CASE WHEN greatest(attempts - uncharged, 0) >= max_attempts
                            THEN 'failed' ELSE 'pending' END
                        WHEN 'interrupted' THEN 'pending'
                        ELSE v_disposition END,
                    next_attempt_at = CASE v_disposition
                        WHEN 'retry' THEN
                            CASE WHEN greatest(attempts - uncharged, 0) >= max_attempts
                            THEN NULL
                            ELSE least(o_now + greatest(p_delay_ms[i], 0), expires_at) END
                        WHEN 'interrupted' THEN o_now
                        ELSE NULL END,
                    uncharged = uncharged
                        + CASE WHEN v_disposition = 'interrupted' THEN 1 ELSE 0 END,
                    last_error = p_error[i], last_error_code = v_error_code,
                    last_response_code = COALESCE(p_http_status[i], last_response_code),
                    lease_until = NULL, updated_at = o_now, log_seq = log_seq + 1,
                    remote_id = COALESCE(p_remote_id[i], remote_id),
                    unknown_since = CASE WHEN v_disposition = 'unknown' THEN o_now
                                    ELSE unknown_since END,
                    check_at = CASE WHEN v_disposition = 'unknown'
                               THEN o_now + greatest(p_check_in_ms[i], 0) END,
                    review_at = CASE WHEN v_disposition = 'unknown'
                                THEN o_now + COALESCE(window_ms, p_default_window_ms)
                                ELSE review_at END
                WHERE id = v_id AND status = 'in_flight' AND claim_seq = v_claim
                RETURNING status, log_seq, attempts, origin
                INTO v_new, v_seq, v_attempts, v_origin;
            END IF;
            UPDATE attempts SET finished_at = o_now,
                outcome = CASE WHEN v_disposition = 'retry' AND v_new = 'failed' THEN 'failed'
                          ELSE v_disposition END,
                http_status = p_http_status[i], error_code = v_error_code,
                error = p_error[i], duration_ms = p_duration_ms[i]
            WHERE delivery_id = v_id AND seq = v_claim AND outcome IS NULL;
            IF v_new IS NOT NULL THEN
                v_origins := v_origins || v_origin || v_origin;
                v_statuses := v_statuses || 'in_flight'::text || v_new;
                v_ns := v_ns || -1::bigint || 1::bigint;
                v_logged := v_logged || ROW(v_id, v_seq, 'in_flight', v_new, v_attempts, o_now,
                    CASE
                        WHEN v_disposition = 'succeeded' THEN 'delivered'
                        WHEN v_error_code IS NOT NULL THEN v_error_code
                        WHEN v_disposition = 'failed' THEN 'failed'
                        WHEN v_disposition = 'unknown' THEN 'unknown'
                        ELSE 'retry' END,
                    CASE
                        WHEN v_new = 'failed' AND v_disposition = 'retry'
                            THEN 'no attempts left'
                        WHEN v_new = 'unknown'
                            THEN 'the request may have reached the target; not resent'
                    END)::transitions;
            END IF;
            o_applied := v_new;
        END IF;

        v_id := p_next_id[i];
        IF v_id IS NOT NULL THEN
            v_claim := p_next_claim_seq[i];
            UPDATE deliveries SET attempts = attempts + 1, lease_until = o_now + p_lease_ms
            WHERE id = v_id AND status = 'in_flight' AND claim_seq = v_claim
                AND (expires_at IS NULL OR expires_at > o_now)
                AND NOT EXISTS (SELECT 1 FROM attempts
                                WHERE delivery_id = v_id AND seq = v_claim)
            RETURNING attempts, cycle, target_url, method, headers, body_kind, body, mode,
                remote_id_pointer, sign_secret
            INTO o_attempts, o_cycle, o_target_url, o_method, o_headers, o_body_kind, o_body,
                o_mode, o_remote_id_pointer, o_sign_secret;
            IF FOUND THEN
                v_started := v_started || ROW(v_id, v_claim, o_cycle, o_attempts, o_now,
                    NULL, NULL, NULL, NULL, NULL, NULL)::attempts;
                o_outcome := 'started';
            ELSE
                -- Not started: find out why, under the row's lock.
                SELECT status, claim_seq, expires_at, origin
                INTO v_status, v_claim_seq, v_expires, v_origin
                FROM deliveries WHERE id = v_id FOR UPDATE;
                IF NOT FOUND OR v_status <> 'in_flight' OR v_claim_seq <> v_claim
                    OR EXISTS (SELECT 1 FROM attempts
                               WHERE delivery_id = v_id AND seq = v_claim)
                    OR v_expires IS NULL OR v_expires > o_now THEN
                    o_outcome := 'not_current';
                ELSE
                    PERFORM spoold_expire(v_id, 'in_flight', o_now);
                    v_origins := v_origins || v_origin || v_origin;
                    v_statuses := v_statuses || 'in_flight'::text || 'failed'::text;
                    v_ns := v_ns || -1::bigint || 1::bigint;
                    o_outcome := 'expired';
                END IF;
            END IF;
        END IF;

        v_origin := p_origin[i];
        v_take := COALESCE(p_take[i], false);
        IF v_take AND p_next_id[i] IS NOT NULL THEN
            RAISE EXCEPTION 'a step either starts a reservation or takes a delivery, not both';
        END IF;
        IF v_origin IS NOT NULL THEN
            v_from := COALESCE(p_from[i], v_start);
            IF v_origin = v_found_origin AND v_found_due > v_from THEN
                v_from := v_found_due;
            END IF;
            FOR k IN 1..64 LOOP
                SELECT id, expires_at, next_attempt_at, mode INTO o_id, v_expires, o_due, v_mode
                FROM deliveries
                WHERE status = 'pending' AND origin = v_origin
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
                    v_origins := v_origins || v_origin || v_origin;
                    v_statuses := v_statuses || 'pending'::text || 'failed'::text;
                    v_ns := v_ns || -1::bigint || 1::bigint;
                    o_id := NULL;
                    o_due := NULL;
                    CONTINUE;
                END IF;
                IF v_take AND v_mode = 'at_least_once' THEN
                    -- Taken: claimed with its attempt started, as the scheduler's claim does.
                    UPDATE deliveries SET status = 'in_flight', claim_seq = claim_seq + 1,
                        attempts = attempts + 1, lease_until = o_now + p_lease_ms,
                        updated_at = o_now, log_seq = log_seq + 1
                    WHERE id = o_id AND status = 'pending'
                    RETURNING claim_seq, log_seq, attempts, cycle, target_url, method, headers,
                        body_kind, body, mode, remote_id_pointer, sign_secret
                    INTO o_claim_seq, v_seq, o_attempts, o_cycle, o_target_url, o_method,
                        o_headers, o_body_kind, o_body, o_mode, o_remote_id_pointer,
                        o_sign_secret;
                    IF NOT FOUND THEN
                        o_id := NULL;
                        o_due := NULL;
                        CONTINUE;
                    END IF;
                    v_started := v_started || ROW(o_id, o_claim_seq, o_cycle, o_attempts, o_now,
                        NULL, NULL, NULL, NULL, NULL, NULL)::attempts;
                    v_logged := v_logged || ROW(o_id, v_seq, 'pending', 'in_flight', o_attempts,
                        o_now, 'claimed', NULL)::transitions;
                    o_outcome := 'started';
                ELSE
                    UPDATE deliveries SET status = 'in_flight', claim_seq = claim_seq + 1,
                        lease_until = o_now + p_lease_ms, updated_at = o_now,
                        log_seq = log_seq + 1
                    WHERE id = o_id AND status = 'pending'
                    RETURNING claim_seq, log_seq, attempts INTO o_claim_seq, v_seq, v_attempts;
                    IF NOT FOUND THEN
                        o_id := NULL;
                        o_due := NULL;
                        CONTINUE;
                    END IF;
                    v_logged := v_logged || ROW(o_id, v_seq, 'pending', 'in_flight', v_attempts,
                        o_now, 'reserved', NULL)::transitions;
                END IF;
                v_origins := v_origins || v_origin || v_origin;
                v_statuses := v_statuses || 'pending'::text || 'in_flight'::text;
                v_ns := v_ns || -1::bigint || 1::bigint;
                v_found_origin := v_origin;
                v_found_due := o_due;
                EXIT;
            END LOOP;
        END IF;

        RETURN NEXT;
    END LOOP;
    INSERT INTO attempts SELECT * FROM unnest(v_started);
    INSERT INTO transitions SELECT * FROM unnest(v_logged);
    -- A reservation and the result recorded after it cancel out on `in_flight`: a busy slot's
    -- delivery usually adds nothing here but -1 pending and +1 succeeded, for the whole batch.
    INSERT INTO delivery_count_deltas (origin, status, n)
    SELECT o, st, sum(n) FROM unnest(v_origins, v_statuses, v_ns) AS c (o, st, n)
    GROUP BY o, st HAVING sum(n) <> 0;
    PERFORM set_config('spoold.counting', '', true);
END $$;

-- The server's side of a busy target's slots, without the daemon: `spoold_replay_create(n)`
-- writes n pending deliveries to one origin as the daemon's create batches do (12 a
-- statement, a transaction each); `spoold_replay_steps(slots, take)` then delivers them all
-- through `slots` slots, one `spoold_steps` call (one transaction) per round of every slot's
-- step, each recording a success. Without `take`, a slot's step starts the delivery it reserved
-- in the last step and reserves the next (schema 2 on); with it, the step takes the next
-- (schema 6 on). Used by scripts/pg-steps-callgrind; see docs/src/lab-notes.md.

CREATE PROCEDURE spoold_replay_create(n INT) LANGUAGE plpgsql AS $$
DECLARE
    v_base BIGINT := spoold_now_ms() - 1000 - n;
    v_k INT := 0;
BEGIN
    WHILE v_k < n LOOP
        INSERT INTO deliveries (id, target_url, origin, method, headers, body_kind, body,
            max_attempts, next_attempt_at, expires_at, mode, status, created_at, updated_at,
            log_seq)
        SELECT lpad(to_hex(v_base) || lpad(to_hex(v_k + g), 12, '0'), 32, '0'),
            'http://127.0.0.1:9/hook', 'http://127.0.0.1:9', 'POST',
            '[["content-type","application/json"]]', 1,
            convert_to('{"event":"order.paid","order":12345678}', 'UTF8'), 100,
            v_base + v_k + g, v_base + 86400000, 'at_least_once', 'pending', v_base, v_base, 1
        FROM generate_series(1, least(12, n - v_k)) g;
        INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at, reason)
        SELECT lpad(to_hex(v_base) || lpad(to_hex(v_k + g), 12, '0'), 32, '0'), 1, NULL,
            'pending', 0, v_base, 'created'
        FROM generate_series(1, least(12, n - v_k)) g;
        v_k := v_k + 12;
        COMMIT;
    END LOOP;
END $$;

-- One call of `spoold_steps`: slot j records a success for `p_id[j]` (if any), starts
-- `p_next[j]` (if any), and reserves — or takes — for the origin.
CREATE FUNCTION spoold_replay_call(p_id TEXT[], p_claim BIGINT[], p_next TEXT[],
    p_next_claim BIGINT[], p_take BOOLEAN, p_from BIGINT)
RETURNS SETOF RECORD LANGUAGE plpgsql AS $$
DECLARE
    v_n INT := cardinality(p_id);
    v_none_t TEXT[] := array_fill(NULL::text, ARRAY[v_n]);
    v_none_b BIGINT[] := array_fill(NULL::bigint, ARRAY[v_n]);
    v_disposition TEXT[] := array_fill('succeeded'::text, ARRAY[v_n]);
    v_http BIGINT[] := array_fill(200::bigint, ARRAY[v_n]);
    v_duration BIGINT[] := array_fill(1::bigint, ARRAY[v_n]);
    v_origin TEXT[] := array_fill('http://127.0.0.1:9'::text, ARRAY[v_n]);
    v_from BIGINT[] := array_fill(p_from, ARRAY[v_n]);
BEGIN
    IF p_take THEN
        RETURN QUERY SELECT o_n, o_applied, o_outcome, o_id, o_claim_seq, o_due
        FROM spoold_steps(p_id, p_claim, v_disposition, v_none_b, v_none_b, v_http, v_none_t,
            v_none_t, v_duration, v_none_t, 3600000, p_next, p_next_claim, v_origin, 30000,
            v_from, array_fill(true, ARRAY[v_n]));
    ELSE
        RETURN QUERY SELECT o_n, o_applied, o_outcome, o_id, o_claim_seq, o_due
        FROM spoold_steps(p_id, p_claim, v_disposition, v_none_b, v_none_b, v_http, v_none_t,
            v_none_t, v_duration, v_none_t, 3600000, p_next, p_next_claim, v_origin, 30000,
            v_from);
    END IF;
END $$;

CREATE PROCEDURE spoold_replay_steps(slots INT, take BOOLEAN, OUT delivered BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    -- Per slot: the attempt on the wire (started), and the reservation to start next.
    v_sent TEXT[] := array_fill(NULL::text, ARRAY[slots]);
    v_sent_claim BIGINT[] := array_fill(NULL::bigint, ARRAY[slots]);
    v_next TEXT[] := array_fill(NULL::text, ARRAY[slots]);
    v_next_claim BIGINT[] := array_fill(NULL::bigint, ARRAY[slots]);
    v_from BIGINT;
    v_busy BOOLEAN := true;
    r RECORD;
BEGIN
    delivered := 0;
    -- The first round starts (or takes) each slot's first delivery; without taking, the
    -- first round only reserves, and the second starts that and reserves the next.
    FOR round IN 1..CASE WHEN take THEN 1 ELSE 2 END LOOP
        FOR r IN SELECT * FROM spoold_replay_call(v_sent, v_sent_claim, v_next, v_next_claim,
                take, v_from)
            AS (o_n INT, o_applied TEXT, o_outcome TEXT, o_id TEXT, o_claim_seq BIGINT,
                o_due BIGINT)
        LOOP
            IF take OR round = 2 THEN
                v_sent[r.o_n] := COALESCE(v_next[r.o_n], r.o_id);
                v_sent_claim[r.o_n] := COALESCE(v_next_claim[r.o_n], r.o_claim_seq);
            END IF;
            v_next[r.o_n] := CASE WHEN take THEN NULL ELSE r.o_id END;
            v_next_claim[r.o_n] := CASE WHEN take THEN NULL ELSE r.o_claim_seq END;
            v_from := COALESCE(r.o_due, v_from);
        END LOOP;
        COMMIT;
    END LOOP;
    WHILE v_busy LOOP
        v_busy := false;
        FOR r IN SELECT * FROM spoold_replay_call(v_sent, v_sent_claim, v_next, v_next_claim,
                take, v_from)
            AS (o_n INT, o_applied TEXT, o_outcome TEXT, o_id TEXT, o_claim_seq BIGINT,
                o_due BIGINT)
        LOOP
            IF v_sent[r.o_n] IS NOT NULL THEN
                IF r.o_applied IS DISTINCT FROM 'succeeded' THEN
                    RAISE EXCEPTION 'a result was not recorded: %', r;
                END IF;
                delivered := delivered + 1;
            END IF;
            IF v_next[r.o_n] IS NOT NULL AND r.o_outcome IS DISTINCT FROM 'started' THEN
                RAISE EXCEPTION 'a reservation was not started: %', r;
            END IF;
            IF take THEN
                v_sent[r.o_n] := r.o_id;
                v_sent_claim[r.o_n] := r.o_claim_seq;
            ELSE
                v_sent[r.o_n] := v_next[r.o_n];
                v_sent_claim[r.o_n] := v_next_claim[r.o_n];
                v_next[r.o_n] := r.o_id;
                v_next_claim[r.o_n] := r.o_claim_seq;
            END IF;
            v_from := COALESCE(r.o_due, v_from);
            v_busy := v_busy OR v_sent[r.o_n] IS NOT NULL OR v_next[r.o_n] IS NOT NULL;
        END LOOP;
        COMMIT;
    END LOOP;
END $$;

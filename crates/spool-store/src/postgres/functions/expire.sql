-- Fail a delivery as `expired`. The caller holds the row's lock and has checked its status.
CREATE OR REPLACE FUNCTION spoold_expire(p_id TEXT, p_from TEXT, p_now BIGINT) RETURNS VOID
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

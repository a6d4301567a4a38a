-- Deliveries counted by origin and status (`delivery_count_deltas`), kept by triggers in the
-- transactions that change them: a delta commits or rolls back with the change it counts.
-- Creates and purges are counted per statement, from the rows they touched (transition
-- tables): every statement PostgreSQL runs pays its executor start-up, and a row trigger ran
-- one INSERT per created row. Status changes are counted per row (a trigger with transition
-- tables cannot name the columns it fires on, and would collect every start and lease
-- renewal), without a WHEN clause: PostgreSQL parses and plans a trigger's WHEN once per
-- statement that may fire it (every UPDATE naming `status`), while a check at the top of the
-- function costs one call per changed row. `spoold_steps` counts its own changes, once per
-- call, and raises `spoold.counting` meanwhile (local to its transaction, lowered before it
-- returns) so that they are not counted twice.
CREATE OR REPLACE FUNCTION spoold_count_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        -- `spoold_steps` counts its own changes.
        IF OLD.status <> NEW.status
            AND current_setting('spoold.counting', true) IS DISTINCT FROM 'steps' THEN
            INSERT INTO delivery_count_deltas (origin, status, n)
            VALUES (OLD.origin, OLD.status, -1), (NEW.origin, NEW.status, 1);
        END IF;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO delivery_count_deltas (origin, status, n) VALUES (NEW.origin, NEW.status, 1);
    ELSE
        INSERT INTO delivery_count_deltas (origin, status, n) VALUES (OLD.origin, OLD.status, -1);
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION spoold_count_deliveries_in() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_count_deltas (origin, status, n)
    SELECT origin, status, count(*) FROM spoold_new GROUP BY origin, status;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION spoold_count_deliveries_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_count_deltas (origin, status, n)
    SELECT origin, status, -count(*) FROM spoold_old GROUP BY origin, status;
    RETURN NULL;
END $$;
-- Per statement where the database has transition tables (PostgreSQL); per row, through
-- `spoold_count_delivery`, where it has not (YugabyteDB, CockroachDB: `feature_not_supported`
-- or a syntax error): the same deltas, one INSERT a row instead of one a statement. A session
-- with `spoold.transition_tables = off` takes the per-row path on PostgreSQL too (the tests
-- run it that way).
DO $$
BEGIN
    IF current_setting('spoold.transition_tables', true) = 'off' THEN
        RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
            MESSAGE = 'transition tables turned off (spoold.transition_tables)';
    END IF;
    CREATE TRIGGER deliveries_counted_in AFTER INSERT ON deliveries
        REFERENCING NEW TABLE AS spoold_new
        FOR EACH STATEMENT EXECUTE FUNCTION spoold_count_deliveries_in();
    CREATE TRIGGER deliveries_counted_out AFTER DELETE ON deliveries
        REFERENCING OLD TABLE AS spoold_old
        FOR EACH STATEMENT EXECUTE FUNCTION spoold_count_deliveries_out();
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    CREATE TRIGGER deliveries_counted_in AFTER INSERT ON deliveries
        FOR EACH ROW EXECUTE FUNCTION spoold_count_delivery();
    CREATE TRIGGER deliveries_counted_out AFTER DELETE ON deliveries
        FOR EACH ROW EXECUTE FUNCTION spoold_count_delivery();
END $$;
CREATE TRIGGER deliveries_counted_moved AFTER UPDATE OF status ON deliveries
    FOR EACH ROW EXECUTE FUNCTION spoold_count_delivery();

-- spoold's PostgreSQL schema, version 3: creates and purges counted per statement. Every
-- statement PostgreSQL runs pays its executor start-up (opening the table and its indexes,
-- building the plan's state); the row triggers of version 1 ran one INSERT per created row.

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

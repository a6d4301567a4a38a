-- The database's clock in milliseconds since the epoch: every time spoold stores on
-- PostgreSQL is read from it, so hosts with skewed clocks agree on what is due.
CREATE OR REPLACE FUNCTION spoold_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

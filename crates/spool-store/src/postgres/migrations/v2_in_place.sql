-- Version 2: a start and a lease renewal change only columns no index reads (`attempts`,
-- `lease_until`; `updated_at` stays the time of the last status change), so PostgreSQL can
-- write the new row version in place (HOT, on a page with room left: hence the fill factor)
-- instead of adding an entry to every index. In-flight claims are few (the hosts'
-- concurrency): the lease sweep reads them all and checks each lease. (Version 2 also brought
-- `spoold_steps`, functions/steps.sql.)
DROP INDEX deliveries_lease;
CREATE INDEX deliveries_in_flight ON deliveries (id) WHERE status = 'in_flight';
ALTER TABLE deliveries SET (fillfactor = 85);

-- Version 4: one index fewer to write on every reservation. `deliveries_status` (status, id)
-- lists the in-flight deliveries in id order, which is all the lease sweep asks of an index;
-- `deliveries_in_flight` (version 2) repeated it, and every reservation (a row entering
-- `in_flight`) paid an entry in it — about 100 bytes of WAL — and every statement writing
-- `deliveries` one more index to open.
DROP INDEX deliveries_in_flight;

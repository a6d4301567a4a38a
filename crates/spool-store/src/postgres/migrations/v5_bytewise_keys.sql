-- Version 5: keys compare bytewise. Under a linguistic collation (the database default: `C.UTF-8`,
-- `en_US.UTF-8`, …) every B-tree comparison of a text key goes through `strcoll`; ids,
-- origins, statuses, idempotency keys, task types and lock names need no linguistic order,
-- and `COLLATE "C"` orders them as SQLite does (byte by byte). Only the indexes on these
-- columns are rebuilt (no table rewrite: the type is unchanged). The triggers whose WHEN
-- reads `status` depend on its type: they are dropped first, and put back without WHEN by
-- functions/count_deliveries.sql and functions/count_tasks.sql.
DROP TRIGGER IF EXISTS deliveries_counted_moved ON deliveries;
DROP TRIGGER IF EXISTS tasks_counted_moved ON tasks;
ALTER TABLE deliveries ALTER COLUMN id TYPE TEXT COLLATE "C",
    ALTER COLUMN origin TYPE TEXT COLLATE "C", ALTER COLUMN status TYPE TEXT COLLATE "C";
ALTER TABLE attempts ALTER COLUMN delivery_id TYPE TEXT COLLATE "C";
ALTER TABLE idempotency_keys ALTER COLUMN key TYPE TEXT COLLATE "C",
    ALTER COLUMN delivery_id TYPE TEXT COLLATE "C";
ALTER TABLE transitions ALTER COLUMN delivery_id TYPE TEXT COLLATE "C";
ALTER TABLE checks ALTER COLUMN delivery_id TYPE TEXT COLLATE "C";
ALTER TABLE delivery_count_deltas ALTER COLUMN origin TYPE TEXT COLLATE "C",
    ALTER COLUMN status TYPE TEXT COLLATE "C";
ALTER TABLE tasks ALTER COLUMN id TYPE TEXT COLLATE "C",
    ALTER COLUMN task_type TYPE TEXT COLLATE "C", ALTER COLUMN scope TYPE TEXT COLLATE "C",
    ALTER COLUMN idempotency_key TYPE TEXT COLLATE "C", ALTER COLUMN status TYPE TEXT COLLATE "C";
ALTER TABLE task_attempts ALTER COLUMN task_id TYPE TEXT COLLATE "C";
ALTER TABLE task_transitions ALTER COLUMN task_id TYPE TEXT COLLATE "C";
ALTER TABLE task_locks ALTER COLUMN name TYPE TEXT COLLATE "C",
    ALTER COLUMN task_id TYPE TEXT COLLATE "C";
ALTER TABLE task_steps ALTER COLUMN task_id TYPE TEXT COLLATE "C",
    ALTER COLUMN name TYPE TEXT COLLATE "C";
ALTER TABLE task_count_deltas ALTER COLUMN status TYPE TEXT COLLATE "C";

-- Tasks counted by status (`task_count_deltas`, deltas as deliveries' counts are), by row
-- triggers: tasks are created and changed a few at a time.
CREATE OR REPLACE FUNCTION spoold_count_task() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.status = NEW.status THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO task_count_deltas (status, n) VALUES (OLD.status, -1);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO task_count_deltas (status, n) VALUES (NEW.status, 1);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER tasks_counted_in AFTER INSERT ON tasks
    FOR EACH ROW EXECUTE FUNCTION spoold_count_task();
CREATE TRIGGER tasks_counted_out AFTER DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION spoold_count_task();
CREATE TRIGGER tasks_counted_moved AFTER UPDATE OF status ON tasks
    FOR EACH ROW EXECUTE FUNCTION spoold_count_task();

-- Version 8: tasks whose executor is gone are taken over and ended before they leave
-- `running`. `tasks.ending` says why the executor is gone (`daemon_restart`, `lease_expired`)
-- while another executor ends what is left of the attempt; the task keeps its locks and its
-- quota slot until then. Each attempt records where its processes can be seen from (`host`:
-- machine, boot and pid namespace), how long its executor gives them after SIGTERM
-- (`kill_grace_ms`: a host that cannot see them waits that long past the lease) and its
-- group's session (`sid`); a task, where the host holding its lease runs (`executor_host`: a
-- restarted daemon takes over at once what a dead earlier run on the same host held). Only
-- columns are added: hosts of schema 7 keep working beside 8.
ALTER TABLE tasks ADD COLUMN ending TEXT;
ALTER TABLE tasks ADD COLUMN executor_host TEXT;
ALTER TABLE task_attempts ADD COLUMN host TEXT;
ALTER TABLE task_attempts ADD COLUMN kill_grace_ms BIGINT;
ALTER TABLE task_attempts ADD COLUMN sid BIGINT;

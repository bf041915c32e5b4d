-- ffriver 0016: what outbox partition maintenance is waiting for (issue 36,
-- item 3), so that an operator sees it in ffctl status and in the metrics.
--
-- A maintenance pass (outboxretention.MaintainPartitions) never waits for a
-- lock another session holds: it leaves the attach or the drop for the next
-- pass. A pass that left one writes its table's row here, in its own
-- transaction (since_ms stays that of the first pass that gave up); a pass
-- that did all its work deletes the row. The row is a report, never the
-- record of work: deleting it loses nothing (the next pass that gives up
-- writes it again).
CREATE TABLE ff_outbox_maintenance_wait (
    stream        text     PRIMARY KEY,  -- the outbox table
    since_ms      bigint   NOT NULL,     -- the first pass that gave up (database clock)
    last_ms       bigint   NOT NULL,     -- the latest pass that gave up
    passes        bigint   NOT NULL,     -- passes that gave up since since_ms
    drops_left    text[]   NOT NULL,     -- partitions the latest pass did not drop
    creates_left  text[]   NOT NULL,     -- partitions it did not create
    lock_holders  jsonb    NOT NULL      -- the sessions that held the table then (outboxretention.LockHolder)
);

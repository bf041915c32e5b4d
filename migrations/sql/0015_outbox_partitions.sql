-- ffriver 0015: the outboxes become time-partitioned, so that retention
-- drops whole partitions instead of deleting rows (issue 27, item 1).
--
-- Each outbox (ff_lease_event, ff_completion_event) becomes a table
-- partitioned by range of written_at_ms, the database's clock when the row
-- was inserted (a column default: writers, upstream's plain INSERTs
-- included, never set it). Partitions are created ahead by the
-- outbox_retention scanner's job (outbox.MaintainPartitions), never by a
-- writer, and dropped whole once every row in them is older than the
-- retention and no named consumer still needs one of them; a drop is
-- recorded in ff_outbox_trim exactly as a row trim is, so streams keep their
-- gap errors.
--
-- A DEFAULT partition (<table>_default) takes every row no time partition
-- covers: the rows written before the first maintenance run, and any
-- written while maintenance is not running. Writers never fail for want of
-- a partition. Its old rows are trimmed row by row, as before this
-- migration (executions.Store.TrimOutboxTx).
--
-- The table as it was becomes one partition, <table>_legacy, in place: its
-- rows keep their event ids, transaction ids and everything a cursor or a
-- named consumer's position refers to, and get written_at_ms 0 (the range
-- (MINVALUE, 1)). It is registered as written before this migration, so
-- retention drops it whole a retention period after the upgrade (its rows
-- older than that are kept until then). An empty one is dropped at once.
--
-- event_id keeps counting from where the table's identity stood (a sequence
-- now: a partitioned table's key must include the partition column, so the
-- primary key becomes (event_id, written_at_ms)). The migration rebuilds
-- the legacy rows' primary key index and checks their partition bound: on
-- a large outbox, its writers wait for that, in this transaction.

-- The time partitions of each outbox, as the maintenance created them.
CREATE TABLE ff_outbox_partition (
    stream             text   NOT NULL,  -- the outbox table
    partition_name     text   NOT NULL,
    lo_ms              bigint,           -- the range's lower bound (NULL: MINVALUE)
    hi_ms              bigint NOT NULL,  -- the range's upper bound, exclusive
    written_before_ms  bigint NOT NULL,  -- every row in it was written before this
    created_at_ms      bigint NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    PRIMARY KEY (stream, partition_name)
);
CREATE INDEX ff_outbox_partition_hi_idx ON ff_outbox_partition (stream, hi_ms);

-- Step 1 for table t: the old table becomes t_legacy (its indexes renamed
-- alike), and t a partitioned table of the same columns plus written_at_ms,
-- with a sequence for event_id that starts where the identity stood.
CREATE FUNCTION pg_temp.ff_outbox_partition_begin(t text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    legacy text := t || '_legacy';
    seq text := t || '_event_id_seq';
    last_id bigint;
    called boolean;
    ix record;
BEGIN
    EXECUTE format('SELECT last_value, is_called FROM %s', pg_get_serial_sequence(t, 'event_id')) INTO last_id, called;
    EXECUTE format('ALTER TABLE %I RENAME TO %I', t, legacy);
    FOR ix IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
              WHERE i.indrelid = legacy::regclass LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', ix.relname, legacy || substr(ix.relname, length(t) + 1));
    END LOOP;
    EXECUTE format('ALTER TABLE %I ALTER COLUMN event_id DROP IDENTITY', legacy);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', legacy, legacy || '_pkey');
    EXECUTE format('ALTER TABLE %I ADD COLUMN written_at_ms bigint NOT NULL DEFAULT 0', legacy);
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS, PRIMARY KEY (event_id, written_at_ms)) PARTITION BY RANGE (written_at_ms)', t, legacy);
    EXECUTE format('ALTER TABLE %I ALTER COLUMN written_at_ms SET DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint', t);
    EXECUTE format('CREATE SEQUENCE %I OWNED BY %I.event_id', seq, t);
    PERFORM setval(seq::regclass, last_id, called);
    EXECUTE format('ALTER TABLE %I ALTER COLUMN event_id SET DEFAULT nextval(%L::regclass)', t, seq);
END $$;

-- Step 2, once t has its indexes and triggers: the default partition, and
-- the legacy table attached as the partition of written_at_ms 0 (its
-- indexes are attached to t's, the primary key's built), or dropped when
-- it holds no row.
CREATE FUNCTION pg_temp.ff_outbox_partition_end(t text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    legacy text := t || '_legacy';
    any_row boolean;
BEGIN
    EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', t || '_default', t);
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I)', legacy) INTO any_row;
    IF NOT any_row THEN
        EXECUTE format('DROP TABLE %I', legacy);
        RETURN;
    END IF;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (1)', t, legacy);
    INSERT INTO ff_outbox_partition (stream, partition_name, lo_ms, hi_ms, written_before_ms)
    VALUES (t, legacy, NULL, 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
END $$;

SELECT pg_temp.ff_outbox_partition_begin('ff_lease_event');
CREATE INDEX ff_lease_event_stream_idx ON ff_lease_event (xact_id, event_id);
CREATE INDEX ff_lease_event_lookup_idx ON ff_lease_event (partition_key, execution_id, occurred_at_ms);
CREATE INDEX ff_lease_event_occurred_idx ON ff_lease_event USING brin (occurred_at_ms) WITH (autosummarize = on);
SELECT pg_temp.ff_outbox_partition_end('ff_lease_event');

SELECT pg_temp.ff_outbox_partition_begin('ff_completion_event');
CREATE INDEX ff_completion_event_stream_idx ON ff_completion_event (xact_id, event_id);
CREATE INDEX ff_completion_event_lookup_idx ON ff_completion_event (partition_key, execution_id, occurred_at_ms);
CREATE INDEX ff_completion_event_occurred_idx ON ff_completion_event USING brin (occurred_at_ms);
-- 0012's trigger moves to the partitioned table (which gives it to every
-- partition, the legacy one included).
DROP TRIGGER ff_completion_event_foreign_dispatch_trg ON ff_completion_event_legacy;
CREATE TRIGGER ff_completion_event_foreign_dispatch_trg BEFORE UPDATE OF dispatched_at_ms ON ff_completion_event FOR EACH ROW
    WHEN (OLD.dispatched_at_ms IS NULL AND NEW.dispatched_at_ms IS NOT NULL AND NEW.dispatched_by IS NULL)
    EXECUTE FUNCTION ff_completion_event_foreign_dispatch();
SELECT pg_temp.ff_outbox_partition_end('ff_completion_event');

DROP FUNCTION pg_temp.ff_outbox_partition_begin(text);
DROP FUNCTION pg_temp.ff_outbox_partition_end(text);

-- ffriver 0003: streams by pairs of snapshots (see package subscribe).
--
-- A tick is a snapshot of the server, taken in turn: each tick sees every
-- transaction the one before it saw. A stream's batch is the span between two
-- consecutive ticks: the outbox rows whose writer is visible in the newer
-- tick and was not in the older. Every reader walks the same ticks, so every
-- reader delivers the same batches in the same order, and a long writer
-- delays only its own rows.
CREATE TABLE ff_stream_tick (
    tick_id    bigint   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    snap_xmin  bigint   NOT NULL,
    snap_xmax  bigint   NOT NULL,
    snap_xip   bigint[] NOT NULL,
    at_ms      bigint   NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
);

-- ff_stream_ticks returns up to lim ticks after tick `after`, in order. When
-- there is none it takes a new one first, unless nothing finished since the
-- newest tick. Ticks are serialised by a table lock (readers of the table are
-- not blocked), and the snapshot is taken after the lock is held, so each
-- tick contains the one before. A tick is a hint, not data: its commit does
-- not wait for the WAL flush (a tick lost in a crash is taken again; cursors
-- carry their snapshots themselves). When the newest tick is ahead of the
-- server (the schema was restored on another server), the ticks are
-- meaningless here and are dropped. Ticks older than an hour are pruned.
CREATE FUNCTION ff_stream_ticks(after bigint, lim integer)
RETURNS SETOF ff_stream_tick LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    newest ff_stream_tick;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ff_stream_tick WHERE tick_id > after) THEN
        PERFORM set_config('synchronous_commit', 'off', true);
        LOCK TABLE ff_stream_tick IN EXCLUSIVE MODE;
        SELECT * INTO newest FROM ff_stream_tick ORDER BY tick_id DESC LIMIT 1;
        IF newest.tick_id IS NOT NULL
           AND newest.snap_xmax > pg_snapshot_xmax(pg_current_snapshot())::text::bigint THEN
            DELETE FROM ff_stream_tick;
            newest := NULL;
        END IF;
        IF newest.tick_id IS NULL OR newest.tick_id <= after THEN
            INSERT INTO ff_stream_tick (snap_xmin, snap_xmax, snap_xip)
            SELECT x.xmin, x.xmax, x.xip
            FROM (SELECT pg_snapshot_xmin(s)::text::bigint AS xmin, pg_snapshot_xmax(s)::text::bigint AS xmax,
                         ARRAY(SELECT i::text::bigint FROM pg_snapshot_xip(s) i ORDER BY 1) AS xip
                  FROM pg_current_snapshot() s) x
            WHERE newest.tick_id IS NULL OR x.xmax <> newest.snap_xmax OR x.xip <> newest.snap_xip;
            IF newest.tick_id % 1000 = 0 THEN
                DELETE FROM ff_stream_tick
                WHERE at_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 3600000
                  AND tick_id < newest.tick_id;
            END IF;
        END IF;
    END IF;
    RETURN QUERY SELECT * FROM ff_stream_tick WHERE tick_id > after ORDER BY tick_id LIMIT lim;
END $$;

-- What retention deleted: one row per trimming transaction and run of
-- transaction ids. A run never spans a transaction that was still running
-- when it was trimmed. A stream whose position has not yet seen a
-- transaction inside a run has lost events: it gets a gap error.
CREATE TABLE ff_outbox_trim (
    trim_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream         text   NOT NULL,  -- the outbox table
    min_xact       bigint NOT NULL,
    max_xact       bigint NOT NULL,
    min_event_id   bigint NOT NULL,
    max_event_id   bigint NOT NULL,
    events         bigint NOT NULL,
    min_at_ms      bigint NOT NULL,  -- occurred_at_ms of the oldest and newest deleted event
    max_at_ms      bigint NOT NULL,
    trimmed_at_ms  bigint NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
);
CREATE INDEX ff_outbox_trim_stream_idx ON ff_outbox_trim (stream, max_xact);

-- Named durable consumers: the acknowledged position of each, stored with
-- each acknowledged batch. Every row visible in the position's snapshot
-- (snap_*) was acknowledged; retention keeps the others while the position
-- is younger than max_lag_ms.
CREATE TABLE ff_stream_consumer (
    stream          text     NOT NULL,  -- the outbox table
    name            text     NOT NULL,
    cursor          bytea    NOT NULL,
    snap_xmin       bigint   NOT NULL,
    snap_xmax       bigint   NOT NULL,
    snap_xip        bigint[] NOT NULL,
    position_at_ms  bigint   NOT NULL,  -- when the position's snapshot was taken
    max_lag_ms      bigint   NOT NULL,
    created_at_ms   bigint   NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    updated_at_ms   bigint   NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    PRIMARY KEY (stream, name)
);

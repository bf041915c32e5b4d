-- ffriver 0018: stream ticks that survive a failover, and that say which
-- history they belong to (issue 37, item 5).
--
-- A promoted standby keeps the primary's transaction ids. With asynchronous
-- replication it may lack the primary's last commits, and it hands their
-- transaction ids out again to other transactions: a stream position taken
-- after the last commit the standby received names transaction ids that
-- mean other transactions there. Streams must tell such a position from
-- one this server's history holds (subscribe.PositionAheadError).
--
-- So a tick now records the WAL timeline it was taken on, in its id:
-- tick_id = timeline << 40 | n, n counting up within the timeline (ticks
-- are serialised by the table lock). A promotion starts a new timeline, so
-- the ticks of the new primary never reuse the id of a tick the old one
-- took and lost, and a position's tick says on which timeline it was taken.
-- Ids only grow: ticks of the ids before this migration (timeline 0) come
-- first. Along one timeline a tick is in this server's history exactly when
-- a tick of that timeline with an id at least as high is: pruning keeps the
-- newest tick of every timeline.
--
-- And where the server has synchronous standbys (synchronous_standby_names
-- is set), a tick commits as durably as the events it covers (the session's
-- synchronous_commit): a tick a stream has read is on the standby, so after
-- a failover every position a stream handed out is in the new primary's
-- history. Elsewhere a tick still commits without waiting for the WAL flush
-- (a flush per tick, under the table lock, tripled the stream's delivery
-- latency at 1,000 events/s); a tick lost in a crash or an asynchronous
-- failover then makes the positions taken at it refused, never skipped.
ALTER TABLE ff_stream_tick ALTER COLUMN tick_id DROP IDENTITY IF EXISTS;

-- ff_wal_timeline returns the WAL timeline this server writes on (1 for a
-- server never promoted nor restored to a point in time). It fails on a
-- standby: streams read from the primary.
CREATE FUNCTION ff_wal_timeline() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int::bigint
$$;

-- ff_stream_ticks returns up to lim ticks after tick `after`, in order. When
-- there is none it takes a new one first, unless nothing finished since the
-- newest tick. Ticks are serialised by a table lock (readers of the table are
-- not blocked), and the snapshot is taken after the lock is held, so each
-- tick contains the one before. When the newest tick is ahead of the server
-- (the schema was restored on another server), the ticks are meaningless
-- here and are dropped. Ticks older than an hour are pruned, except the
-- newest of each timeline. A tick waits for the WAL flush (and the
-- synchronous standbys) only where synchronous standbys are configured.
CREATE OR REPLACE FUNCTION ff_stream_ticks(after bigint, lim integer)
RETURNS SETOF ff_stream_tick LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    newest ff_stream_tick;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ff_stream_tick WHERE tick_id > after) THEN
        IF current_setting('synchronous_standby_names') = '' THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        LOCK TABLE ff_stream_tick IN EXCLUSIVE MODE;
        SELECT * INTO newest FROM ff_stream_tick ORDER BY tick_id DESC LIMIT 1;
        IF newest.tick_id IS NOT NULL
           AND newest.snap_xmax > pg_snapshot_xmax(pg_current_snapshot())::text::bigint THEN
            DELETE FROM ff_stream_tick;
            newest := NULL;
        END IF;
        IF newest.tick_id IS NULL OR newest.tick_id <= after THEN
            INSERT INTO ff_stream_tick (tick_id, snap_xmin, snap_xmax, snap_xip)
            SELECT greatest(coalesce(newest.tick_id + 1, 0), ff_wal_timeline() << 40), x.xmin, x.xmax, x.xip
            FROM (SELECT pg_snapshot_xmin(s)::text::bigint AS xmin, pg_snapshot_xmax(s)::text::bigint AS xmax,
                         ARRAY(SELECT i::text::bigint FROM pg_snapshot_xip(s) i ORDER BY 1) AS xip
                  FROM pg_current_snapshot() s) x
            WHERE newest.tick_id IS NULL OR x.xmax <> newest.snap_xmax OR x.xip <> newest.snap_xip;
            IF newest.tick_id % 1000 = 0 THEN
                DELETE FROM ff_stream_tick t
                WHERE at_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 3600000
                  AND tick_id < newest.tick_id
                  AND EXISTS (SELECT 1 FROM ff_stream_tick n
                              WHERE n.tick_id > t.tick_id AND n.tick_id < ((t.tick_id >> 40) + 1) << 40);
            END IF;
        END IF;
    END IF;
    RETURN QUERY SELECT * FROM ff_stream_tick WHERE tick_id > after ORDER BY tick_id LIMIT lim;
END $$;

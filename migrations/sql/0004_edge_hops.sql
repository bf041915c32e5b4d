-- ffriver 0004: a flow hop lives in the data, not only in its ff.advance River
-- job. An edge whose upstream is terminal while its outcome is not counted
-- yet (upstream_outcome IS NULL) is due work for the dependency scanner,
-- whatever happened to any River job (lost, cancelled, discarded, deleted).
--
-- upstream_terminal_at_ms is when the edge's upstream became terminal. A
-- trigger on ff_exec_core writes it, so every writer marks the edges of an
-- execution it makes terminal: ffriver's own transitions and plain SQL alike.
ALTER TABLE ff_edge ADD COLUMN upstream_terminal_at_ms bigint;

CREATE FUNCTION ff_exec_core_mark_edges() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE ff_edge
    SET upstream_terminal_at_ms = COALESCE(NEW.terminal_at_ms, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
    WHERE partition_key = NEW.partition_key AND flow_id = NEW.flow_id AND upstream_eid = NEW.execution_id
      AND upstream_outcome IS NULL AND upstream_terminal_at_ms IS NULL;
    RETURN NULL;
END $$;
CREATE TRIGGER ff_exec_core_mark_edges_trg AFTER UPDATE OF lifecycle_phase ON ff_exec_core FOR EACH ROW
    WHEN (NEW.flow_id IS NOT NULL AND NEW.lifecycle_phase IN ('terminal', 'cancelled')
          AND OLD.lifecycle_phase NOT IN ('terminal', 'cancelled'))
    EXECUTE FUNCTION ff_exec_core_mark_edges();

-- Edges already waiting when this migration runs.
UPDATE ff_edge e
SET upstream_terminal_at_ms = COALESCE(c.terminal_at_ms, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
FROM ff_exec_core c
WHERE c.partition_key = e.partition_key AND c.execution_id = e.upstream_eid
  AND e.upstream_outcome IS NULL AND c.lifecycle_phase IN ('terminal', 'cancelled');

-- The dependency scanner's due hops (its tick's count and its scans): only
-- hops not yet counted are in it, so it stays as small as the work in flight.
CREATE INDEX ff_edge_hop_due_idx ON ff_edge (partition_key, upstream_terminal_at_ms, edge_id)
    WHERE upstream_outcome IS NULL AND upstream_terminal_at_ms IS NOT NULL;

-- The dependency scanner no longer reads completion events (dispatched_at_ms
-- is kept, and still written, for compatibility).
DROP INDEX ff_completion_event_pending_dispatch_idx;

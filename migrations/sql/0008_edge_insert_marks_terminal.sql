-- ffriver 0008: an edge inserted (by hand, or by a foreign writer) after its
-- upstream became terminal is due for the dependency scanner at once. The
-- trigger of 0004 marks the edges of an execution when it becomes terminal;
-- an edge written later had no mark and, without an outcome, was never
-- counted: its downstream waited forever. AddDependencies records the
-- outcome of an upstream already terminal itself, so its edges are not
-- affected.
--
-- As with 0004, a writer that inserts an edge while another transaction
-- makes its upstream terminal, without locking the upstream's row, can
-- still miss both marks; AddDependencies locks the upstreams.
CREATE FUNCTION ff_edge_mark_terminal_upstream() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    SELECT COALESCE(c.terminal_at_ms, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
    INTO NEW.upstream_terminal_at_ms
    FROM ff_exec_core c
    WHERE c.partition_key = NEW.partition_key AND c.execution_id = NEW.upstream_eid
      AND c.lifecycle_phase IN ('terminal', 'cancelled');
    RETURN NEW;
END $$;
CREATE TRIGGER ff_edge_mark_terminal_upstream_trg BEFORE INSERT ON ff_edge FOR EACH ROW
    WHEN (NEW.upstream_outcome IS NULL AND NEW.upstream_terminal_at_ms IS NULL)
    EXECUTE FUNCTION ff_edge_mark_terminal_upstream();

-- Edges already written that way.
UPDATE ff_edge e
SET upstream_terminal_at_ms = COALESCE(c.terminal_at_ms, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
FROM ff_exec_core c
WHERE c.partition_key = e.partition_key AND c.execution_id = e.upstream_eid
  AND e.upstream_outcome IS NULL AND e.upstream_terminal_at_ms IS NULL
  AND c.lifecycle_phase IN ('terminal', 'cancelled');

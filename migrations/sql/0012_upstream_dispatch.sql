-- ffriver 0012: a flow upstream's outcome is counted once, whoever counts it
-- first: ffriver, or upstream FlowFabric's own completion dispatch
-- (ff-backend-postgres v0.15.0) running on the same tables.
--
-- Upstream's dispatcher claims a completion event by setting
-- dispatched_at_ms where it is NULL, then counts the outcome in every
-- downstream edge group of the event's execution (the group counters), and
-- knows nothing of ff_edge.upstream_outcome, ffriver's record of a counted
-- edge. ffriver claims the same events the same way before it counts a hop
-- (executions.Store.AdvanceTx), and marks its own claims: dispatched_by is
-- 'ffriver' for them, 'foreign' for a claim by anyone else (set here, from
-- an UPDATE that sets dispatched_at_ms without naming dispatched_by). A hop
-- whose upstream's event a foreign dispatcher claimed is recorded on its
-- edge but not counted again. Events claimed before this migration have no
-- mark and are taken as ffriver's.
ALTER TABLE ff_completion_event ADD COLUMN dispatched_by text;

CREATE FUNCTION ff_completion_event_foreign_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.dispatched_by := 'foreign';
    RETURN NEW;
END $$;
CREATE TRIGGER ff_completion_event_foreign_dispatch_trg BEFORE UPDATE OF dispatched_at_ms ON ff_completion_event FOR EACH ROW
    WHEN (OLD.dispatched_at_ms IS NULL AND NEW.dispatched_at_ms IS NOT NULL AND NEW.dispatched_by IS NULL)
    EXECUTE FUNCTION ff_completion_event_foreign_dispatch();

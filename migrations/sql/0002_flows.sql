-- ffriver 0002: what the flow cascade needs on top of the upstream DAG tables.
-- Each edge remembers the outcome of its upstream once counted, so replaying
-- a hop is a no-op, and a group counts each upstream exactly once.
ALTER TABLE ff_edge ADD COLUMN upstream_outcome text, ADD COLUMN resolved_at_ms bigint;
-- Edge-group member snapshots and dispatcher lookups by upstream.
CREATE INDEX ff_edge_group_pending_idx ON ff_edge_group (partition_key, flow_id)
    WHERE cancel_siblings_pending_flag;

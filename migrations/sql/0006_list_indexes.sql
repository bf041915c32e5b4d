-- ffriver 0006: indexes for listing executions (executions.Store.List, the
-- execution view's list and ffctl exec list), newest first with a keyset
-- position. Each filter has an index in the list's order, so a page over
-- millions of executions reads about a page of rows:
--
--   no filter      ff_exec_core_created_idx, read backwards
--   namespace      ff_exec_core_namespace_idx
--   lane           ff_exec_core_lane_idx
--   state          ff_exec_core_state_idx
--
-- A flow's members are found by ff_exec_core_flow_idx in the flow's
-- partition and an id or id prefix by the primary key.
CREATE INDEX ff_exec_core_created_idx ON ff_exec_core (created_at_ms, partition_key, execution_id);
CREATE INDEX ff_exec_core_namespace_idx ON ff_exec_core ((raw_fields->>'namespace'), created_at_ms, partition_key, execution_id);
CREATE INDEX ff_exec_core_lane_idx ON ff_exec_core (lane_id, created_at_ms, partition_key, execution_id);
CREATE INDEX ff_exec_core_state_idx ON ff_exec_core (public_state, created_at_ms, partition_key, execution_id);

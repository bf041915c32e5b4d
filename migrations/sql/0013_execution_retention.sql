-- ffriver 0013: execution retention (scanner execution_retention, action
-- executions.Store.RemoveExecutionsTx).
--
-- Terminal executions by partition and age: the scanner's Due reads one
-- range of it per partition (terminal_at_ms below the cutoff) and each
-- removal batch reads on from its keyset position (terminal_at_ms,
-- execution_id). A legacy 'cancelled' phase is terminal, as everywhere.
CREATE INDEX ff_exec_core_terminal_idx ON ff_exec_core (partition_key, terminal_at_ms, execution_id)
    WHERE lifecycle_phase IN ('terminal', 'cancelled');

-- One row per execution retention removed, written in the removing
-- transaction, so that reading a removed id says "removed by retention at
-- removed_at_ms" instead of "not found" (ff.RemovedError). namespace and
-- tags are copied from the execution so a filtered deployment expires only
-- its own tombstones. A tombstone is expired by the same job once it is
-- older than the retention (an id is remembered for one more retention
-- period after its removal); an execution created again with a removed id
-- shadows its tombstone, and its own removal overwrites it.
CREATE TABLE ff_exec_removed (
    partition_key   smallint NOT NULL,
    execution_id    uuid     NOT NULL,
    flow_id         uuid,
    namespace       text,
    tags            jsonb,
    public_state    text     NOT NULL,
    terminal_at_ms  bigint   NOT NULL,
    removed_at_ms   bigint   NOT NULL,
    PRIMARY KEY (partition_key, execution_id)
);
CREATE INDEX ff_exec_removed_expiry_idx ON ff_exec_removed (partition_key, removed_at_ms);

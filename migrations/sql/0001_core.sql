-- ffriver 0001: executions, attempts, outboxes, flows, partition config.
-- Every table keeps the upstream FlowFabric names and columns, so SQL written
-- against upstream (plain INSERTs with the seed column lists) works here.
-- Partitioning is logical: partition_key leads every execution-keyed primary key.

CREATE TABLE ff_partition_config (
    singleton_lock  boolean PRIMARY KEY DEFAULT true CHECK (singleton_lock),
    num_partitions  integer NOT NULL CHECK (num_partitions BETWEEN 1 AND 32767),
    ff_version      text    NOT NULL,
    created_at_ms   bigint  NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
);

-- Lanes executions were created in; Claim on a lane never registered is an
-- error (a typo in a worker's lane would otherwise wait forever).
CREATE TABLE ff_lane_registry (
    lane_id           text   PRIMARY KEY,
    registered_at_ms  bigint NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    registered_by     text
);

CREATE TABLE ff_exec_core (
    partition_key         smallint NOT NULL,
    execution_id          uuid     NOT NULL,
    flow_id               uuid,
    lane_id               text     NOT NULL,
    required_capabilities text[]   NOT NULL DEFAULT '{}',
    attempt_index         integer  NOT NULL DEFAULT 0,
    lifecycle_phase       text     NOT NULL,
    ownership_state       text     NOT NULL,
    eligibility_state     text     NOT NULL,
    public_state          text     NOT NULL,
    attempt_state         text     NOT NULL,
    blocking_reason       text,
    cancellation_reason   text,
    cancelled_by          text,
    priority              integer  NOT NULL DEFAULT 0,
    created_at_ms         bigint   NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    terminal_at_ms        bigint,
    -- The execution deadline only (upstream overloads it with the delay).
    deadline_at_ms        bigint,
    -- When a delayed (runnable, not_eligible_until_time) execution comes due.
    delay_until_ms        bigint,
    payload               bytea,
    result                bytea,
    policy                jsonb    NOT NULL DEFAULT '{}',
    raw_fields            jsonb    NOT NULL DEFAULT '{}',
    started_at_ms         bigint,
    lease_reclaim_count   integer  NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_key, execution_id)
);

-- Claim: one query across all partitions, by lane, priority, then age.
CREATE INDEX ff_exec_core_claim_idx ON ff_exec_core (lane_id, priority DESC, created_at_ms, execution_id)
    WHERE lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now';
-- delayed_promoter.
CREATE INDEX ff_exec_core_delay_idx ON ff_exec_core (partition_key, delay_until_ms)
    WHERE delay_until_ms IS NOT NULL;
CREATE INDEX ff_exec_core_delay_due_idx ON ff_exec_core (delay_until_ms) INCLUDE (partition_key)
    WHERE delay_until_ms IS NOT NULL;
-- execution_deadline: only executions that can still pass their deadline.
CREATE INDEX ff_exec_core_deadline_idx ON ff_exec_core (partition_key, deadline_at_ms)
    WHERE deadline_at_ms IS NOT NULL AND lifecycle_phase NOT IN ('terminal', 'cancelled');
CREATE INDEX ff_exec_core_deadline_due_idx ON ff_exec_core (deadline_at_ms) INCLUDE (partition_key)
    WHERE deadline_at_ms IS NOT NULL AND lifecycle_phase NOT IN ('terminal', 'cancelled');
CREATE INDEX ff_exec_core_flow_idx ON ff_exec_core (partition_key, flow_id) WHERE flow_id IS NOT NULL;

-- Compatibility with upstream writers that park a delayed execution by
-- writing the due time into deadline_at_ms: move it to delay_until_ms.
CREATE FUNCTION ff_exec_core_legacy_delay() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.delay_until_ms := NEW.deadline_at_ms;
    NEW.deadline_at_ms := NULL;
    RETURN NEW;
END $$;
CREATE TRIGGER ff_exec_core_legacy_delay_trg BEFORE INSERT ON ff_exec_core FOR EACH ROW
    WHEN (NEW.eligibility_state = 'not_eligible_until_time' AND NEW.delay_until_ms IS NULL
          AND NEW.deadline_at_ms IS NOT NULL)
    EXECUTE FUNCTION ff_exec_core_legacy_delay();

-- Every lane an execution is inserted in is registered, whoever inserts it.
-- search_path is pinned to this schema so the trigger works under any caller's.
CREATE FUNCTION ff_exec_core_register_lanes() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO ff_lane_registry (lane_id, registered_by)
    SELECT DISTINCT lane_id, 'insert' FROM new_rows
    ON CONFLICT (lane_id) DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER ff_exec_core_register_lanes_trg AFTER INSERT ON ff_exec_core
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION ff_exec_core_register_lanes();

CREATE TABLE ff_attempt (
    partition_key       smallint NOT NULL,
    execution_id        uuid     NOT NULL,
    attempt_index       integer  NOT NULL,
    worker_id           text,
    worker_instance_id  text,
    lease_id            uuid,
    lease_epoch         bigint   NOT NULL DEFAULT 0,
    lease_expires_at_ms bigint,
    started_at_ms       bigint,
    terminal_at_ms      bigint,
    outcome             text,
    usage               jsonb,
    policy              jsonb,
    raw_fields          jsonb    NOT NULL DEFAULT '{}',
    PRIMARY KEY (partition_key, execution_id, attempt_index)
);

-- attempt_timeout: per-partition scan, and the tick's "which partitions are due".
CREATE INDEX ff_attempt_lease_expiry_idx ON ff_attempt (partition_key, lease_expires_at_ms)
    WHERE lease_expires_at_ms IS NOT NULL;
CREATE INDEX ff_attempt_lease_due_idx ON ff_attempt (lease_expires_at_ms) INCLUDE (partition_key)
    WHERE lease_expires_at_ms IS NOT NULL;
CREATE INDEX ff_attempt_worker_idx ON ff_attempt (partition_key, worker_id) WHERE worker_id IS NOT NULL;

-- Outbox rows record the transaction id of their writer (xact_id, a column
-- default, so plain INSERTs get it too), for commit-safe stream order (see
-- package subscribe): a reader only reads rows whose xact_id is below the
-- oldest transaction still running, and orders by (xact_id, event_id).
-- The horizon below which every writer has finished.
CREATE FUNCTION ff_xact_horizon() RETURNS bigint LANGUAGE sql VOLATILE
    AS $$ SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint $$;

CREATE TABLE ff_lease_event (
    event_id            bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    execution_id        text   NOT NULL,
    lease_id            text,
    event_type          text   NOT NULL,
    occurred_at_ms      bigint NOT NULL,
    partition_key       integer NOT NULL,
    namespace           text,
    instance_tag        text,
    attempt_index       integer,
    lease_epoch         bigint,
    worker_instance_id  text,
    xact_id             bigint NOT NULL DEFAULT (pg_current_xact_id()::text)::bigint
);
CREATE INDEX ff_lease_event_stream_idx ON ff_lease_event (xact_id, event_id);
CREATE INDEX ff_lease_event_occurred_idx ON ff_lease_event USING brin (occurred_at_ms);

CREATE TABLE ff_completion_event (
    event_id          bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    partition_key     smallint NOT NULL,
    execution_id      uuid     NOT NULL,
    flow_id           uuid,
    outcome           text     NOT NULL,
    namespace         text,
    instance_tag      text,
    occurred_at_ms    bigint   NOT NULL,
    committed_at_ms   bigint   NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    dispatched_at_ms  bigint,
    xact_id           bigint   NOT NULL DEFAULT (pg_current_xact_id()::text)::bigint
);
CREATE INDEX ff_completion_event_stream_idx ON ff_completion_event (xact_id, event_id);
CREATE INDEX ff_completion_event_lookup_idx ON ff_completion_event (partition_key, execution_id, occurred_at_ms);
CREATE INDEX ff_completion_event_pending_dispatch_idx ON ff_completion_event (committed_at_ms)
    WHERE dispatched_at_ms IS NULL AND flow_id IS NOT NULL;
CREATE INDEX ff_completion_event_occurred_idx ON ff_completion_event USING brin (occurred_at_ms);

CREATE TABLE ff_flow_core (
    partition_key      smallint NOT NULL,
    flow_id            uuid     NOT NULL,
    graph_revision     bigint   NOT NULL DEFAULT 0,
    public_flow_state  text     NOT NULL DEFAULT 'open',
    created_at_ms      bigint   NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    terminal_at_ms     bigint,
    raw_fields         jsonb    NOT NULL DEFAULT '{}',
    PRIMARY KEY (partition_key, flow_id)
);

CREATE TABLE ff_edge (
    partition_key   smallint NOT NULL,
    flow_id         uuid     NOT NULL,
    edge_id         uuid     NOT NULL,
    upstream_eid    uuid     NOT NULL,
    downstream_eid  uuid     NOT NULL,
    policy          jsonb    NOT NULL DEFAULT '{}',
    policy_version  bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_key, flow_id, edge_id)
);
CREATE INDEX ff_edge_downstream_idx ON ff_edge (partition_key, flow_id, downstream_eid) INCLUDE (upstream_eid, policy_version);
CREATE INDEX ff_edge_upstream_idx ON ff_edge (partition_key, flow_id, upstream_eid);

CREATE TABLE ff_edge_group (
    partition_key                    smallint NOT NULL,
    flow_id                          uuid     NOT NULL,
    downstream_eid                   uuid     NOT NULL,
    policy                           jsonb    NOT NULL DEFAULT '{"kind":"all_of"}',
    k_target                         integer  NOT NULL DEFAULT 0,
    success_count                    integer  NOT NULL DEFAULT 0,
    fail_count                       integer  NOT NULL DEFAULT 0,
    skip_count                       integer  NOT NULL DEFAULT 0,
    running_count                    integer  NOT NULL DEFAULT 0,
    cancel_siblings_pending_flag     boolean  NOT NULL DEFAULT false,
    cancel_siblings_pending_members  text[]   NOT NULL DEFAULT '{}',
    -- One-shot resolution (upstream lacks it): pending, satisfied or impossible.
    group_state                      text     NOT NULL DEFAULT 'pending',
    resolved_at_ms                   bigint,
    PRIMARY KEY (partition_key, flow_id, downstream_eid)
);

CREATE TABLE ff_pending_cancel_groups (
    partition_key   smallint NOT NULL,
    flow_id         uuid     NOT NULL,
    downstream_eid  uuid     NOT NULL,
    enqueued_at_ms  bigint   NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    PRIMARY KEY (partition_key, flow_id, downstream_eid)
);
CREATE INDEX ff_pending_cancel_groups_enqueued_idx ON ff_pending_cancel_groups (enqueued_at_ms);

-- ffriver 0009: executions created and claimed the upstream FlowFabric way
-- (ff-backend-postgres v0.15.0), see README "Compatibility with upstream SQL".
--
-- Upstream's create writes policy NULL when the execution has no policy.
-- ffriver reads a missing retry policy as "no retries" already; the column
-- stays NOT NULL for ffriver's readers, so a NULL becomes the default
-- policy, '{}', before the constraint is checked.
CREATE FUNCTION ff_exec_core_default_policy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.policy := '{}';
    RETURN NEW;
END $$;
CREATE TRIGGER ff_exec_core_default_policy_trg BEFORE INSERT OR UPDATE OF policy ON ff_exec_core FOR EACH ROW
    WHEN (NEW.policy IS NULL)
    EXECUTE FUNCTION ff_exec_core_default_policy();

-- Upstream's claim grants (its migration 0017), with its columns, keys and
-- indexes, so its scheduler can issue them and its typed claim consume
-- them. ffriver itself neither writes nor reads them. Upstream hashes the
-- table into 256 children; a plain table answers the same statements.
CREATE TABLE ff_claim_grant (
    partition_key       smallint NOT NULL,
    grant_id            bytea    NOT NULL,
    execution_id        uuid     NOT NULL,
    kind                text     NOT NULL CHECK (kind IN ('claim', 'reclaim')),
    worker_id           text     NOT NULL,
    worker_instance_id  text     NOT NULL,
    lane_id             text,
    capability_hash     text,
    worker_capabilities jsonb    NOT NULL DEFAULT '[]',
    route_snapshot_json text,
    admission_summary   text,
    grant_ttl_ms        bigint   NOT NULL,
    issued_at_ms        bigint   NOT NULL,
    expires_at_ms       bigint   NOT NULL,
    PRIMARY KEY (partition_key, grant_id)
);
CREATE INDEX ff_claim_grant_execution_idx ON ff_claim_grant (partition_key, execution_id);
CREATE INDEX ff_claim_grant_expiry_idx ON ff_claim_grant (expires_at_ms);

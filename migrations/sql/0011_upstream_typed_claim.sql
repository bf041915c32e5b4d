-- ffriver 0011: leases taken by upstream FlowFabric's typed claim
-- (ff-backend-postgres v0.15.0, claim_execution) expire like any other.
--
-- In ffriver ff_exec_core.attempt_index is the current attempt, the one
-- holding the lease; the scanners find a lease by it. Upstream's typed
-- claim leases the attempt at the index its caller expects and leaves
-- attempt_index pointing at the next one, where no attempt row exists, so
-- the lease was never found. The claim is recognised by what it writes: the
-- row becomes active from another phase with a new attempt_index, no
-- attempt row exists at it, and the attempt just below holds a lease. The
-- index is then set to that attempt: ffriver's meaning. What upstream meant
-- by the pointer, the next attempt, is what ffriver's retries move to; so
-- that its typed fail (which leaves attempt_index as the claim set it)
-- still moves a retry to the next attempt, a row going back from active to
-- runnable with a retry pending and the same attempt_index moves to the
-- next one. ffriver's own writes never match either case (its claims keep
-- the index, its retries set it).
CREATE FUNCTION ff_exec_core_typed_claim() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ff_attempt a WHERE a.partition_key = NEW.partition_key
                       AND a.execution_id = NEW.execution_id AND a.attempt_index = NEW.attempt_index)
       AND EXISTS (SELECT 1 FROM ff_attempt a WHERE a.partition_key = NEW.partition_key
                       AND a.execution_id = NEW.execution_id AND a.attempt_index = NEW.attempt_index - 1
                       AND a.lease_expires_at_ms IS NOT NULL) THEN
        NEW.attempt_index := NEW.attempt_index - 1;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER ff_exec_core_typed_claim_trg BEFORE UPDATE OF attempt_index ON ff_exec_core FOR EACH ROW
    WHEN (NEW.lifecycle_phase = 'active' AND OLD.lifecycle_phase <> 'active' AND NEW.attempt_index <> OLD.attempt_index)
    EXECUTE FUNCTION ff_exec_core_typed_claim();

CREATE FUNCTION ff_exec_core_typed_retry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.attempt_index := OLD.attempt_index + 1;
    RETURN NEW;
END $$;
CREATE TRIGGER ff_exec_core_typed_retry_trg BEFORE UPDATE ON ff_exec_core FOR EACH ROW
    WHEN (OLD.lifecycle_phase = 'active' AND NEW.lifecycle_phase = 'runnable'
          AND NEW.attempt_state = 'pending_retry_attempt' AND NEW.attempt_index = OLD.attempt_index)
    EXECUTE FUNCTION ff_exec_core_typed_retry();

-- Leases typed-claimed before this migration.
UPDATE ff_exec_core c SET attempt_index = c.attempt_index - 1
WHERE c.lifecycle_phase = 'active'
  AND NOT EXISTS (SELECT 1 FROM ff_attempt a WHERE a.partition_key = c.partition_key
                      AND a.execution_id = c.execution_id AND a.attempt_index = c.attempt_index)
  AND EXISTS (SELECT 1 FROM ff_attempt a WHERE a.partition_key = c.partition_key
                  AND a.execution_id = c.execution_id AND a.attempt_index = c.attempt_index - 1
                  AND a.lease_expires_at_ms IS NOT NULL);

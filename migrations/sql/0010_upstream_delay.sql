-- ffriver 0010: delays written the upstream FlowFabric way (ff-backend-postgres
-- v0.15.0) are delays, never deadlines. ffriver keeps a delay in
-- delay_until_ms and the execution deadline in deadline_at_ms; upstream
-- writes a delay in one of two places, recognised here by what it writes
-- with it (the row becomes not_eligible_until_time, without a
-- delay_until_ms, which ffriver never leaves it without):
--
--   - its handle-based delay writes the due time into deadline_at_ms (the
--     column it overloads), with runnable / unowned / attempt_interrupted
--     and public_state untouched: the value moves to delay_until_ms, the
--     execution deadline the row had before the statement stays, and the
--     public state becomes delayed (what upstream's own reader derives);
--   - its typed fail with a retry left writes it only into
--     raw_fields.delay_until (a string of milliseconds), with
--     pending_retry_attempt, blocking_reason waiting_for_retry_backoff and
--     public_state delayed, deadline_at_ms untouched: it is copied into
--     delay_until_ms.
--
-- An INSERT of a delayed row is read the same way (the trigger of 0001 did
-- the first half for INSERTs only; this one replaces it). A delayed row
-- whose due time is in neither place cannot be promoted: the
-- delayed_promoter reports it as unprocessable (ff_exec_core_delay_unknown_idx
-- finds it), never guesses.
DROP TRIGGER ff_exec_core_legacy_delay_trg ON ff_exec_core;
DROP FUNCTION ff_exec_core_legacy_delay();

CREATE FUNCTION ff_exec_core_upstream_delay() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    raw_until text := NEW.raw_fields->>'delay_until';
    raw_new   boolean := raw_until ~ '^[0-9]{1,18}$';
BEGIN
    IF TG_OP = 'UPDATE' THEN
        raw_new := raw_new AND raw_until IS DISTINCT FROM OLD.raw_fields->>'delay_until';
    END IF;
    IF raw_new THEN
        NEW.delay_until_ms := raw_until::bigint;
    ELSIF TG_OP = 'INSERT' AND NEW.deadline_at_ms IS NOT NULL THEN
        NEW.delay_until_ms := NEW.deadline_at_ms;
        NEW.deadline_at_ms := NULL;
    ELSIF TG_OP = 'UPDATE' AND NEW.deadline_at_ms IS NOT NULL AND NEW.deadline_at_ms IS DISTINCT FROM OLD.deadline_at_ms THEN
        NEW.delay_until_ms := NEW.deadline_at_ms;
        NEW.deadline_at_ms := OLD.deadline_at_ms;
        IF NEW.lifecycle_phase = 'runnable' THEN
            NEW.public_state := 'delayed';
            NEW.blocking_reason := COALESCE(NEW.blocking_reason, 'waiting_for_delay');
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER ff_exec_core_upstream_delay_trg BEFORE INSERT OR UPDATE ON ff_exec_core FOR EACH ROW
    WHEN (NEW.eligibility_state = 'not_eligible_until_time' AND NEW.delay_until_ms IS NULL)
    EXECUTE FUNCTION ff_exec_core_upstream_delay();

-- Rows delayed the upstream way before this migration: a typed retry's
-- raw_fields.delay_until, else (the handle-based delay's shape,
-- attempt_interrupted) deadline_at_ms.
UPDATE ff_exec_core
SET delay_until_ms = CASE WHEN attempt_state <> 'attempt_interrupted' AND raw_fields->>'delay_until' ~ '^[0-9]{1,18}$'
                          THEN (raw_fields->>'delay_until')::bigint ELSE deadline_at_ms END,
    deadline_at_ms = CASE WHEN attempt_state <> 'attempt_interrupted' AND raw_fields->>'delay_until' ~ '^[0-9]{1,18}$'
                          THEN deadline_at_ms END
WHERE eligibility_state = 'not_eligible_until_time' AND delay_until_ms IS NULL
  AND (deadline_at_ms IS NOT NULL OR raw_fields->>'delay_until' ~ '^[0-9]{1,18}$');

-- Delayed rows with no known due time, for the delayed_promoter's report.
CREATE INDEX ff_exec_core_delay_unknown_idx ON ff_exec_core (partition_key)
    WHERE eligibility_state = 'not_eligible_until_time' AND delay_until_ms IS NULL;

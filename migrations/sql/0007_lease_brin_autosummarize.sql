-- ffriver 0007: the lease outbox's BRIN index on occurred_at_ms summarizes
-- each block range as soon as it is full (autosummarize: an autovacuum
-- worker does it, off the inserting transaction). Unsummarized ranges match
-- every range query, so without this the tail written since the last
-- vacuum is read in full by every query on a time window:
-- executions.Store.History reads an execution's lease events within its
-- lifetime through this index, and the outbox trim reads by age.
ALTER INDEX ff_lease_event_occurred_idx SET (autosummarize = on);
SELECT brin_summarize_new_values('ff_lease_event_occurred_idx'::regclass);

package outboxretention

import (
	"context"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// MaxTrimLimit is the largest batch Trim deletes in one call.
const MaxTrimLimit = 100_000

// TrimParams select what one Trim call deletes.
type TrimParams struct {
	// Table is LeaseTable or CompletionTable.
	Table string
	// CutoffMs: events that occurred before it are past retention.
	CutoffMs int64
	// NowMs is the time of the call (required), against which a named
	// stream consumer's maximum lag is measured.
	NowMs int64
	// Namespace and InstanceTag restrict the trim to the events whose
	// columns equal them (each nil: any).
	Namespace, InstanceTag *string
	// Limit is the most events one call deletes (1..MaxTrimLimit).
	Limit int
}

// Trim is the outbox_retention job's row trim, in the caller's
// transaction: it deletes at most p.Limit events of p.Table that occurred
// before p.CutoffMs and match the filter, skipping rows another
// transaction holds, and returns how many it deleted. It trims the table's
// DEFAULT partition only (migration 0015): the rows no time partition
// covers. Time partitions are dropped whole (MaintainPartitions), never
// trimmed row by row.
//
// It never deletes an event a named stream consumer (ff_stream_consumer)
// has not acknowledged, unless that consumer's position is older than its
// maximum lag. It records what it deleted in ff_outbox_trim, one row per
// run of transaction ids that spans no transaction still running, so that
// a stream whose position is before a deleted event gets a gap error from a
// lookup instead of resuming past the hole in silence.
func Trim(ctx context.Context, tx pgx.Tx, schema dbutil.Schema, p TrimParams) (int64, error) {
	table, err := tableOf(p.Table)
	if err != nil {
		return 0, err
	}
	if p.NowMs <= 0 {
		return 0, ff.Validationf("now_ms", "%d: want the time of the call, in ms since the epoch", p.NowMs)
	}
	if p.Limit < 1 || p.Limit > MaxTrimLimit {
		return 0, ff.Validationf("limit", "%d is outside 1..%d", p.Limit, MaxTrimLimit)
	}
	t := "{S}" + DefaultPartition(table)
	var n int64
	err = tx.QueryRow(ctx, schema.SQL(`WITH d AS (
		DELETE FROM `+t+` e USING (
			SELECT event_id FROM `+t+` x WHERE occurred_at_ms < $1
			  AND ($2::text IS NULL OR namespace = $2::text) AND ($3::text IS NULL OR instance_tag = $3::text)
			  AND NOT EXISTS (SELECT 1 FROM {S}ff_stream_consumer c
			      WHERE c.stream = $5 AND c.position_at_ms >= $6 - c.max_lag_ms
			        AND `+UnackedSQL+`)
			LIMIT $4 FOR UPDATE SKIP LOCKED) d
		WHERE e.event_id = d.event_id
		RETURNING e.xact_id, e.event_id, e.occurred_at_ms),
	`+trimRecordSQL("$5")+`
	SELECT coalesce(sum(events), 0)::bigint FROM runs`), p.CutoffMs, p.Namespace, p.InstanceTag, p.Limit, table, p.NowMs).Scan(&n)
	if err != nil {
		return 0, dbutil.MapErr(err, "trimming "+table+" events")
	}
	return n, nil
}

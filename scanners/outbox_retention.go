package scanners

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/settings"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
)

// DefaultOutboxRetention is how long outbox events are kept by default.
const DefaultOutboxRetention = 7 * 24 * time.Hour

// OutboxRetentionScanner keeps the lease and completion outboxes to their
// retention. Its scan inserts one ff.trim_outbox job per outbox table that
// has work; each, in one transaction, deletes at most a batch of old events
// from the table's DEFAULT partition (the rows no time partition covers)
// and, in an unfiltered deployment, maintains the table's time partitions
// (outboxretention.MaintainPartitions: drops those older than the retention whole,
// creates the next ones ahead, PartitionWidth of the retention wide). A job
// that deleted a full batch re-enqueues itself in the same transaction, so
// a backlog drains without waiting for the next tick.
//
// It is global (partition 0 stands for the whole table). The filter applies
// to the columns copied onto each event: the namespace, and the instance
// tag value when the filter's tag key is "cairn.instance_id"; a filter on
// another tag key cannot be matched against events, so such a deployment
// deletes no events (leave retention to an unfiltered one). A filtered
// deployment never touches the time partitions, which hold every tenant's
// events.
type OutboxRetentionScanner struct {
	retention time.Duration
}

// NewOutboxRetentionScanner returns the retention scanner keeping events for
// retention (0: DefaultOutboxRetention).
func NewOutboxRetentionScanner(retention time.Duration) *OutboxRetentionScanner {
	if retention <= 0 {
		retention = DefaultOutboxRetention
	}
	return &OutboxRetentionScanner{retention: retention}
}

// ageParams is the params of the scanners whose items are due once older
// than an age (retention, dependency staleness): the age travels in the tick
// and scan args, so scans worked elsewhere use the scheduler's.
type ageParams struct {
	AgeMs int64 `json:"age_ms"`
}

func ageParamsOf(age time.Duration) (json.RawMessage, error) {
	return json.Marshal(ageParams{AgeMs: age.Milliseconds()})
}

// ageCutoff returns now minus the age in params (def when params are
// empty or carry none): items older than the cutoff are due.
func ageCutoff(scanner string, def time.Duration, params json.RawMessage, now int64) (int64, error) {
	age := def.Milliseconds()
	if len(params) > 0 {
		var p ageParams
		if err := json.Unmarshal(params, &p); err != nil {
			return 0, ff.Validationf("params", "%s: %v", scanner, err)
		}
		if p.AgeMs < 0 {
			return 0, ff.Validationf("params", "%s: negative age_ms %d", scanner, p.AgeMs)
		}
		if p.AgeMs > 0 {
			age = p.AgeMs
		}
	}
	return now - age, nil
}

// Name implements Scanner.
func (*OutboxRetentionScanner) Name() string { return OutboxRetention }

// Defaults implements Scanner.
func (*OutboxRetentionScanner) Defaults() workers.Settings {
	return workers.Settings{Interval: time.Minute, Batch: DefaultBatch}
}

// Params implements ParamsProvider: the retention travels in the job args.
func (s *OutboxRetentionScanner) Params() (json.RawMessage, error) { return ageParamsOf(s.retention) }

// Retention returns the retention a tick's params carry (the scheduler's),
// else the scanner's own.
func (s *OutboxRetentionScanner) Retention(params json.RawMessage) (time.Duration, error) {
	cutoff, err := s.cutoff(params, 0)
	return time.Duration(-cutoff) * time.Millisecond, err
}

// OutboxRetention is Retention: its name tells the ticks (package
// workers) that this scanner's retention is the outboxes', against which
// they judge the named consumers.
func (s *OutboxRetentionScanner) OutboxRetention(params json.RawMessage) (time.Duration, error) {
	return s.Retention(params)
}

// StoredSetting implements workers.StoredParamsProvider: the retention
// stored in the schema (ffctl config set outbox_retention) wins over the
// one the tick was inserted with.
func (*OutboxRetentionScanner) StoredSetting() string { return OutboxRetention }

// StoredParams implements workers.StoredParamsProvider.
func (*OutboxRetentionScanner) StoredParams(value string) (json.RawMessage, error) {
	d, err := settings.ParseDuration(OutboxRetention, value, settings.MinRetention, settings.MaxRetention, false)
	if err != nil {
		return nil, err
	}
	return ageParamsOf(d)
}

func (s *OutboxRetentionScanner) cutoff(params json.RawMessage, now int64) (int64, error) {
	return ageCutoff(OutboxRetention, s.retention, params, now)
}

// eventFilter returns the event-column filter parameters, and ok=false when
// the filter cannot be applied to events.
func eventFilter(f ff.Filter) (namespace, instanceTag *string, ok bool) {
	if f.InstanceTag != nil && f.InstanceTag.Key != ff.InstanceTagKey {
		return nil, nil, false
	}
	if f.Namespace != "" {
		ns := f.Namespace
		namespace = &ns
	}
	if f.InstanceTag != nil {
		v := f.InstanceTag.Value
		instanceTag = &v
	}
	return namespace, instanceTag, true
}

const eventFilterSQL = ` AND ($2::text IS NULL OR namespace = $2::text) AND ($3::text IS NULL OR instance_tag = $3::text)`

// retentionWork is a table a retention pass has work on, and the width of
// the time partitions to keep (0: a filtered deployment, which leaves them
// alone).
type retentionWork struct {
	table   string
	widthMs int64
	// old: the table has retention work (old events in its DEFAULT
	// partition, or a partition to drop), not only partitions to create.
	old bool
}

// work returns the tables that have work for a retention pass: events older
// than the cutoff in the DEFAULT partition (that the filter matches), or,
// in an unfiltered deployment, time partitions to create or to drop
// (outboxretention.PartitionsDue).
func (s *OutboxRetentionScanner) work(ctx context.Context, q workers.Querier, st *executions.Store, f ff.Filter, params json.RawMessage, now int64) (tables []retentionWork, cutoff int64, err error) {
	ns, tag, ok := eventFilter(f)
	if !ok {
		return nil, 0, nil
	}
	if cutoff, err = s.cutoff(params, now); err != nil {
		return nil, 0, err
	}
	var width time.Duration
	if f.IsZero() {
		width = outboxretention.PartitionWidth(time.Duration(now-cutoff) * time.Millisecond)
	}
	for _, t := range []string{jobs.OutboxLease, jobs.OutboxCompletion} {
		table, err := jobs.OutboxTable(t)
		if err != nil {
			return nil, 0, err
		}
		var old bool
		if err := q.QueryRow(ctx, dbutil.Schema(st.Schema()).SQL(`SELECT EXISTS (SELECT 1 FROM {S}`+outboxretention.DefaultPartition(table)+` WHERE occurred_at_ms < $1`+eventFilterSQL+`)`),
			cutoff, ns, tag).Scan(&old); err != nil {
			return nil, 0, dbutil.MapErr(err, "looking for old events")
		}
		var parts outboxretention.PartitionWork
		if width > 0 {
			if parts, err = outboxretention.PartitionsDue(ctx, q, dbutil.Schema(st.Schema()), table, width, cutoff); err != nil {
				return nil, 0, err
			}
		}
		if old || parts.Drop || parts.Create {
			tables = append(tables, retentionWork{table: t, widthMs: width.Milliseconds(), old: old || parts.Drop})
		}
	}
	return tables, cutoff, nil
}

// Due implements Scanner: partition 0 when either table has work (the
// DEFAULT partition's BRIN index on occurred_at_ms; ff_outbox_partition),
// counting the tables with retention work: a table that only needs
// partitions created ahead is maintenance, not backlog, and counts 0.
func (s *OutboxRetentionScanner) Due(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Due, error) {
	tables, _, err := s.work(ctx, q, req.Store, req.Filter, req.Params, req.NowMs)
	if err != nil || len(tables) == 0 {
		return nil, err
	}
	return []workers.Due{{Partition: 0, Count: oldTables(tables)}}, nil
}

// oldTables counts the tables with retention work.
func oldTables(tables []retentionWork) int64 {
	var n int64
	for _, t := range tables {
		if t.old {
			n++
		}
	}
	return n
}

// Scan implements Scanner: one retention pass (ff.trim_outbox) per table
// with work.
func (s *OutboxRetentionScanner) Scan(ctx context.Context, q workers.Querier, req workers.ScanRequest) (workers.ScanResult, error) {
	tables, cutoff, err := s.work(ctx, q, req.Store, req.Filter, req.Params, req.NowMs)
	if err != nil {
		return workers.ScanResult{}, err
	}
	ns, tag, _ := eventFilter(req.Filter)
	res := workers.ScanResult{Candidates: int(oldTables(tables))}
	for _, t := range tables {
		res.Items = append(res.Items, jobs.TrimOutboxArgs{Table: t.table, CutoffMs: cutoff, Limit: req.Limit, PartitionMs: t.widthMs, Namespace: ns, InstanceTag: tag})
	}
	return res, nil
}

// heldCountLimit bounds the count of events a consumer holds back: the
// audit runs at most once per report interval, but a week of events is
// worth counting only as "at least".
const heldCountLimit = 100_000

// Unprocessable implements Auditor: events older than the retention that
// are kept because a named stream consumer has not acknowledged them (its
// position is older than the retention and younger than its maximum lag,
// subscribe.Options.ConsumerMaxLag), one set per consumer. A consumer that
// nobody runs any more holds retention back this way until its maximum lag
// (a week by default); the set's reason names it and the command that
// drops it. Counts stop at 100,000 per consumer.
//
// It reads the consumers that hold retention first, from their own small
// table, and counts the events of those only: a count reads the outbox,
// and planning one over an outbox's time partitions took about 1 ms a
// stream on a new connection (ffctl status) when no consumer held
// anything, which is the usual case.
func (s *OutboxRetentionScanner) Unprocessable(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Unprocessable, error) {
	ns, tag, ok := eventFilter(req.Filter)
	if !ok {
		return nil, nil
	}
	cutoff, err := s.cutoff(req.Params, req.NowMs)
	if err != nil {
		return nil, err
	}
	// The streams in the order of the report, and their tables.
	streams, tables := subscribe.Streams(), subscribe.StreamTables()
	type holder struct {
		table, name  string
		lagMs, maxMs int64
	}
	sq := dbutil.Schema(req.Store.Schema())
	rows, err := q.Query(ctx, sq.SQL(`SELECT c.stream, c.name, $2 - c.position_at_ms, c.max_lag_ms
		FROM {S}ff_stream_consumer c
		WHERE c.stream = ANY($3) AND c.position_at_ms < $1 AND c.position_at_ms >= $2 - c.max_lag_ms`),
		cutoff, req.NowMs, tables)
	if err != nil {
		return nil, dbutil.MapErr(err, "reading the consumers that hold retention")
	}
	holders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (holder, error) {
		var h holder
		err := r.Scan(&h.table, &h.name, &h.lagMs, &h.maxMs)
		return h, err
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "reading the consumers that hold retention")
	}
	// By stream (leases first), then by name.
	slices.SortFunc(holders, func(a, b holder) int {
		return cmp.Or(cmp.Compare(slices.Index(tables, a.table), slices.Index(tables, b.table)), strings.Compare(a.name, b.name))
	})
	var out []workers.Unprocessable
	for _, h := range holders {
		stream := streams[slices.Index(tables, h.table)]
		var n int64
		if err := q.QueryRow(ctx, sq.SQL(`SELECT count(*) FROM (SELECT 1 FROM {S}ff_stream_consumer c, {S}`+h.table+` x
			WHERE c.stream = $4 AND c.name = $5 AND x.occurred_at_ms < $1`+eventFilterSQL+` AND `+outboxretention.UnackedSQL+`
			LIMIT `+fmt.Sprint(heldCountLimit)+`) h`), cutoff, ns, tag, h.table, h.name).Scan(&n); err != nil {
			return nil, dbutil.MapErr(err, "counting the events consumer "+h.name+" holds")
		}
		if n == 0 {
			continue
		}
		count := fmt.Sprint(n)
		if n >= heldCountLimit {
			count = "at least " + count
		}
		out = append(out, workers.Unprocessable{
			Reason: fmt.Sprintf("%s events of the %s stream older than the retention (%s) kept for consumer %q, whose position is %s old "+
				"(retention waits for it until %s): if nobody runs it any more, `ffctl consumer drop --stream %s %s` releases them",
				count, stream, time.Duration(req.NowMs-cutoff)*time.Millisecond, h.name, time.Duration(h.lagMs)*time.Millisecond,
				time.Duration(h.maxMs)*time.Millisecond, stream, h.name),
			Count: n,
			List: req.SQL(fmt.Sprintf(`SELECT x.* FROM {S}ff_stream_consumer c, {S}%s x WHERE c.stream = '%s' AND c.name = %s AND x.occurred_at_ms < %d AND %s`,
				h.table, h.table, quoteLiteral(h.name), cutoff, outboxretention.UnackedSQL)),
		})
	}
	return out, nil
}

// quoteLiteral quotes s as a SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

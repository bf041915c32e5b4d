package workers

import (
	"context"
	"encoding/json"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
)

// The plug-in contract of a scanner (what is due) and the helpers its
// author needs. See the package documentation for how to write one.

// Scanner is one kind of background work, seen from the data: it finds which
// partitions have due work and selects the due items of one partition, as
// River job args, one per item. What each item job does is registered next
// to it (Plugin). See the package documentation
// for how to write one.
type Scanner interface {
	// Name identifies the scanner in job arguments, flags and logs:
	// lowercase letters, digits and underscores, starting with a letter.
	Name() string
	// Defaults are the interval and batch size used unless overridden.
	Defaults() Settings
	// Due returns the partitions that have due work, with how many items
	// are due in each, in one query (the tick). A scanner that is not
	// partitioned returns partition 0 when anything is due. With
	// req.Cap set it may stop counting a partition at the cap (Due.Capped):
	// the tick only needs to know whether a partition has anything due,
	// and whether a batch or more.
	Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error)
	// Scan returns at most req.Limit due items of one partition as River
	// job args, with the filter applied in SQL, in a stable order, and the
	// position of the last candidate as Next (the scan re-enqueues itself
	// from there when it filled its batch).
	Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error)
}

// ParamsProvider is implemented by scanners that need settings of their own
// at scan time (for example the outbox retention period). The params are
// carried in the tick and scan job args, so a scan worked by another process
// uses the scheduling process's settings; they are passed back in
// DueRequest.Params and ScanRequest.Params.
type ParamsProvider interface {
	Params() (json.RawMessage, error)
}

// StoredParamsProvider is implemented by scanners whose params are a
// setting stored in the schema (ff_settings: ffctl config set,
// ffriver.SetSetting), such as the retention periods. Their ticks, and
// the backlog ffctl status shows, read the stored value when they run and
// use its params instead of the ones the tick was inserted with; with
// nothing stored they keep those. So whichever process leads, and whatever it was started
// with, runs the schema's value, and a change applies from the next tick.
type StoredParamsProvider interface {
	ParamsProvider
	// StoredSetting names the setting (a row of ff_settings).
	StoredSetting() string
	// StoredParams returns the params for the stored value; an error
	// names the setting and what is wrong with the value.
	StoredParams(value string) (json.RawMessage, error)
}

// Settings are a scanner's schedule and batch size. In an override
// (ffriver.Config.Scanners) a zero field keeps the scanner's default
// (Defaults): 0 cannot be an interval or a batch; for Sweep, where 0 does
// mean something (no scan cursors), NoSweep says it.
type Settings struct {
	// Interval between ticks (River periodic job), at least 10 ms. 0 in an
	// override means the scanner's default.
	Interval time.Duration
	// Batch is the most candidates one scan job selects, 1..100000. 0 in
	// an override means the scanner's default.
	Batch int
	// Disabled scanners get no periodic job; their workers are still
	// registered, so jobs already queued are still worked.
	Disabled bool
	// Sweep, when positive, gives the scanner scan cursors: a scan of a
	// partition reads on from the keyset position after the last item a
	// scan enqueued (ScanResult.Next), so items still queued are not read
	// again at every tick, and once per Sweep a scan starts from the
	// beginning to find what the position passed over (an item whose River
	// job was lost, cancelled or discarded; a row written with a due time
	// behind the position). Such an item waits at most about one Sweep
	// (two when its job vanished just after a sweep); once a partition's
	// oldest due item has waited Sweep/10, its scans sweep early, at most
	// once per Sweep/10 (a catch-up), so a row written behind the position
	// waits about Sweep/10. The scanner's Scan
	// must return its candidates in keyset order with Next set, as
	// ScanExecutions does. 0 in Defaults: every scan starts from the
	// beginning. In an override, 0 keeps the default and NoSweep turns the
	// scan cursors off; any other negative value is an error.
	Sweep time.Duration
}

// NoSweep as Settings.Sweep in an override turns a scanner's scan cursors
// off: every scan starts from the beginning, as with a Sweep of 0 in its
// Defaults (an override's 0 keeps the default).
const NoSweep time.Duration = -1

// Querier runs SQL; pgx.Tx and *pgxpool.Pool satisfy it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Due is one partition with due work.
type Due struct {
	Partition int16
	// Count is how many items are due in the partition; with Capped set,
	// at least that many.
	Count int64
	// Capped says the count stopped at DueRequest.Cap: Count (the cap) is a
	// lower bound, more items are due.
	Capped bool
	// OldestMs is when the partition's oldest due item became due (Unix
	// ms), 0 when the scanner cannot tell. ffctl status reports it as the
	// age of the oldest overdue item.
	OldestMs int64
}

// DueRequest is the input of Scanner.Due.
type DueRequest struct {
	// Store is the execution store of the pipeline: its schema, partition
	// count and clock.
	Store  *executions.Store
	NowMs  int64
	Filter ff.Filter
	Params json.RawMessage
	// Cap, when positive, bounds each partition's count: Due may read at
	// most Cap+1 due items of a partition and return Count = Cap with
	// Capped set when there are more. The tick passes its batch (a
	// partition with a batch or more due gets a scan of its own, whatever
	// the exact number), and so does the backlog that ffctl status, the
	// execution view's live page and the metrics show. 0 counts every
	// due item.
	Cap int
	// AfterMs, when positive, is a wake tick's: every item due at or
	// before it already had a tick, so a timer scanner (NextDueScanner)
	// may leave those out and count only what came due since. 0 counts
	// every due item.
	AfterMs int64
}

// ScanRequest is the input of Scanner.Scan.
type ScanRequest struct {
	// Store is the execution store of the pipeline.
	Store     *executions.Store
	Partition int16
	NowMs     int64
	Limit     int
	Filter    ff.Filter
	Params    json.RawMessage
	// After is the Next of the previous scan in a chain, nil for the first.
	After json.RawMessage
}

// ScanResult is the output of Scanner.Scan.
type ScanResult struct {
	// Candidates is how many rows the scan selected (at most the limit).
	// A scan whose Candidates reached the limit re-enqueues itself.
	Candidates int
	// Items are the per-item jobs to insert; duplicates are dropped.
	Items []river.JobArgs
	// Next is the keyset position after the last candidate.
	Next json.RawMessage
}

// FilterArgs returns the filter as the SQL parameters namespace, tag key and
// tag value (each nil when unset), for a predicate such as
//
//	($1::text IS NULL OR raw_fields->>'namespace' = $1)
//	AND ($2::text IS NULL OR raw_fields->'tags'->>$2::text = $3::text)
//
// Filter values are always parameters, never spliced into SQL.
func (r ScanRequest) FilterArgs() (namespace, tagKey, tagValue *string) {
	return actions.FilterParams(r.Filter)
}

// FilterArgs returns the filter as the SQL parameters namespace, tag key and
// tag value (each nil when unset), as ScanRequest.FilterArgs does: Due
// counts with the same filter as Scan selects.
func (r DueRequest) FilterArgs() (namespace, tagKey, tagValue *string) {
	return actions.FilterParams(r.Filter)
}

// SQL replaces every {S} in q with the quoted schema of ffriver's tables
// and a dot, so a scanner writes {S}ff_exec_core.
func (r DueRequest) SQL(q string) string { return schemaSQL(r.Store, q) }

// SQL replaces every {S} in q with the quoted schema of ffriver's tables
// and a dot, so a scanner writes {S}ff_exec_core.
func (r ScanRequest) SQL(q string) string { return schemaSQL(r.Store, q) }

func schemaSQL(st *executions.Store, q string) string {
	return dbutil.Schema(st.Schema()).SQL(q)
}

// execCursor is the keyset position of the execution scanners: the due time
// and the execution id of the last candidate.
type execCursor struct {
	Ms int64     `json:"ms"`
	ID uuid.UUID `json:"id"`
}

func decodeExecCursor(b json.RawMessage) (ms *int64, id *uuid.UUID, err error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	var c execCursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, nil, ff.Validationf("after", "not a scan cursor: %v", err)
	}
	return &c.Ms, &c.ID, nil
}

// DueByPartition runs a Due query whose rows are (partition, count, oldest
// due time or NULL), such as "SELECT partition_key, count(*), min(due time)
// … GROUP BY partition_key", and returns them as Due.
func DueByPartition(ctx context.Context, q Querier, sql string, args ...any) ([]Due, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, dbutil.MapErr(err, "due partitions")
	}
	out, err := CollectDue(rows)
	return out, dbutil.MapErr(err, "due partitions")
}

// CollectDue reads rows of (partition, count, oldest due time or NULL) as
// DueByPartition does, for a Due that runs its query another way (in a
// batch, or with planner settings of its own).
func CollectDue(rows pgx.Rows) ([]Due, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Due, error) {
		var d Due
		var oldest *int64
		err := r.Scan(&d.Partition, &d.Count, &oldest)
		if oldest != nil {
			d.OldestMs = *oldest
		}
		return d, err
	})
}

// ScanExecutions runs a candidate query returning (execution_id, due_ms,
// extra int) rows and builds items with mk: ExecutionsScanQuery, run.
func ScanExecutions(ctx context.Context, q Querier, req ScanRequest, sql string, mk func(id ff.ExecutionID, extra int32) river.JobArgs) (ScanResult, error) {
	sq, err := ExecutionsScanQuery(req, sql, mk)
	if err != nil {
		return ScanResult{}, err
	}
	rows, err := q.Query(ctx, sq.SQL, sq.Args...)
	if err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning")
	}
	defer rows.Close()
	return sq.Read(rows)
}

// BatchScanner is a Scanner whose Scan is one statement (ScanQuery), so that
// a scan job of several partitions sends every partition's statement in
// one round trip, in its transaction, instead of one round trip each. The
// built-in attempt_timeout, delayed_promoter and execution_deadline
// scanners implement it. ScanQuery(req), run and read, must be what
// Scan(req) does.
type BatchScanner interface {
	Scanner
	ScanQuery(req ScanRequest) (ScanQuery, error)
}

// ScanQuery is one Scan as a statement: SQL with Args, whose rows Read
// turns into the scan's result.
type ScanQuery struct {
	SQL  string
	Args []any
	Read func(pgx.Rows) (ScanResult, error)
}

// ExecutionsScanQuery is the statement of ScanExecutions (for a
// BatchScanner): sql (with {S}) takes $1 partition, $2 now, $3-$5 the
// filter (ExecFilterSQL), $6/$7 the keyset position after which to read
// (NULL: from the beginning) and $8 the limit, and returns (execution_id,
// due_ms, extra int) rows in keyset order; mk builds an item of each.
func ExecutionsScanQuery(req ScanRequest, sql string, mk func(id ff.ExecutionID, extra int32) river.JobArgs) (ScanQuery, error) {
	afterMs, afterID, err := decodeExecCursor(req.After)
	if err != nil {
		return ScanQuery{}, err
	}
	ns, tk, tv := req.FilterArgs()
	return ScanQuery{
		SQL:  req.SQL(sql),
		Args: []any{req.Partition, req.NowMs, ns, tk, tv, afterMs, afterID, req.Limit},
		Read: func(rows pgx.Rows) (ScanResult, error) {
			var res ScanResult
			var last execCursor
			for rows.Next() {
				var u uuid.UUID
				var ms int64
				var extra int32
				if err := rows.Scan(&u, &ms, &extra); err != nil {
					return ScanResult{}, dbutil.MapErr(err, "scanning")
				}
				res.Candidates++
				res.Items = append(res.Items, mk(ff.ExecutionID{Partition: req.Partition, UUID: u}, extra))
				last = execCursor{Ms: ms, ID: u}
			}
			if err := rows.Err(); err != nil {
				return ScanResult{}, dbutil.MapErr(err, "scanning")
			}
			if res.Candidates > 0 {
				res.Next, _ = json.Marshal(last)
			}
			return res, nil
		},
	}, nil
}

// ExecFilterSQL is the filter predicate of ScanExecutions' queries: $3
// namespace, $4/$5 tag key/value, on ff_exec_core aliased c.
const ExecFilterSQL = `
  AND ($3::text IS NULL OR c.raw_fields->>'namespace' = $3::text)
  AND ($4::text IS NULL OR c.raw_fields->'tags'->>$4::text = $5::text)`

// NextDueScanner is a Scanner that can tell when its next item comes due,
// so that the leader's wake loop (ffriver.Service.Wake) ticks it at that moment
// instead of at its next periodic tick. The built-in attempt_timeout,
// delayed_promoter and execution_deadline scanners implement it.
type NextDueScanner interface {
	Scanner
	// NextDueSQL returns a statement of one row of one nullable bigint:
	// the earliest due time later than afterMs of the items Scan returns
	// once they are due (with req's filter), NULL when there is none. It
	// must read one index in due order and stop at its first row: the wake
	// loop runs it several times a second, also on an idle store, with
	// bitmap scans, sorts, JIT and parallel workers off for the statement
	// (so an index in due order is the plan it gets).
	NextDueSQL(req DueRequest, afterMs int64) (sql string, args []any)
}

// RangeScanner is a NextDueScanner that also selects, in one statement over
// every partition, the items that came due in a range of due times: those
// of a wake tick (after DueRequest.AfterMs, at or before DueRequest.NowMs),
// read in the order of its due index. A wake tick of such a scanner
// inserts those items itself, when at most a batch came due, instead of
// fanning out scans: a River job and the scan cursors' locks fewer between
// a due time and its item. The built-in attempt_timeout, delayed_promoter
// and execution_deadline scanners implement it. A scanner that embeds one
// of them and changes its Scan must override DueRangeQuery too.
type RangeScanner interface {
	NextDueScanner
	// DueRangeQuery returns the statement of the items Scan would return
	// that came due after req.AfterMs and at or before req.NowMs, with
	// req's filter, in the partitions 0..Partitions-1, in due order, at
	// most limit of them. Its Read's ScanResult has no Next.
	DueRangeQuery(req DueRequest, limit int) (ScanQuery, error)
}

// ExecutionsRangeQuery is the statement of a RangeScanner over executions:
// sql (with {S}) takes $1 the range's start (exclusive), $2 its end
// (inclusive), $3-$5 the filter (ExecFilterSQL), $6 the schema's
// partition count and $7 the limit, and returns (partition_key,
// execution_id, extra int) rows in due order; mk builds an item of each.
func ExecutionsRangeQuery(req DueRequest, limit int, sql string, mk func(id ff.ExecutionID, extra int32) river.JobArgs) ScanQuery {
	ns, tk, tv := req.FilterArgs()
	return ScanQuery{
		SQL:  req.SQL(sql),
		Args: []any{req.AfterMs, req.NowMs, ns, tk, tv, int(req.Store.Partitions()), limit},
		Read: func(rows pgx.Rows) (ScanResult, error) {
			var res ScanResult
			for rows.Next() {
				var p int16
				var u uuid.UUID
				var extra int32
				if err := rows.Scan(&p, &u, &extra); err != nil {
					return ScanResult{}, dbutil.MapErr(err, "reading due items")
				}
				res.Candidates++
				res.Items = append(res.Items, mk(ff.ExecutionID{Partition: p, UUID: u}, extra))
			}
			return res, dbutil.MapErr(rows.Err(), "reading due items")
		},
	}
}

// Unprocessable is a set of rows that look due to a scanner (they sit in
// its due index) but that no scan of it will ever process: a row in a
// partition outside the schema's partition count, an attempt of no
// execution, a state string outside ffriver's alphabet. They are written
// by hand or by a foreign writer; an operator has to repair or delete them.
// Due never counts them (Due and Scan agree on what is due), so they are
// counted apart: ffctl status shows them and the tick logs them, at most
// once per interval (10 minutes per process).
type Unprocessable struct {
	// Reason says what is wrong with the rows, in a few words.
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
	// AtLeast: the audit stopped reading before the last row that looks
	// due (the built-in audits read at most 1,001), and Count is what it
	// found among them; there may be more.
	AtLeast bool `json:"at_least,omitempty"`
	// List is a query, with the schema and the values of the check written
	// in, that lists the rows (empty when the scanner cannot say).
	List string `json:"list,omitempty"`
}

// Auditor is implemented by scanners that can count the rows they cannot
// process (Unprocessable). It honours req.Filter as the scanner's Due and
// Scan do: a filtered deployment counts only the rows of its own
// executions, and a row with no execution to filter by (an attempt of no
// execution, say) is left to an unfiltered deployment, which counts every
// row. A scanner without it gets the partitions outside the schema's count
// that its Due returns reported as unprocessable, with no list query.
type Auditor interface {
	Unprocessable(ctx context.Context, q Querier, req DueRequest) ([]Unprocessable, error)
}

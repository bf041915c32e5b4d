package scanners

import (
	"context"
	"strings"

	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
)

// dueExecFilterSQL is the filter predicate of the Due queries on
// ff_exec_core aliased c: $2 namespace, $3/$4 tag key/value.
const dueExecFilterSQL = `
  AND ($2::text IS NULL OR c.raw_fields->>'namespace' = $2::text)
  AND ($3::text IS NULL OR c.raw_fields->'tags'->>$3::text = $4::text)`

// dueShape describes the due rows of a scanner for boundedDueSQL.
type dueShape struct {
	// rows is "FROM … WHERE <due predicate and filter>", with $1 the time
	// bound and the filter's $2..$4; {PART} marks where the partition
	// constraint goes (it becomes "AND <part> = part.k" in each
	// partition's count, and nothing in the gate).
	rows string
	// part and due are the rows' partition and due-time columns.
	part, due string
	// gateOrder is the order the gate reads due rows in: that of the
	// index it should read, so that it stops at the first row that holds
	// (an index on the due time alone: the oldest due row of any
	// partition), never a sequential scan that finds nothing when nothing
	// is due.
	gateOrder string
	// partOrdered: an index on (partition, due time) serves each
	// partition's count in due order, so the partition's oldest is its
	// first row. Without one a partition's count reads its rows in any
	// order, and the oldest it reports is exact only when it is not capped
	// or holds the gate's row.
	partOrdered bool
	// timer: due is a time (a NextDueScanner's), and a wake tick's
	// DueRequest.AfterMs ($7, NULL for none) leaves out the rows due at or
	// before it, as a bound of the due index's range (a backlog of items
	// still queued is not read past on every wake tick).
	timer bool
}

// boundedDueSQL is a Due statement that reads, per partition of the schema
// ($5 partitions), at most $6 due rows through an index (a NULL $6 reads
// them all), and nothing at all when no row of any partition is due: a
// gate, one index probe, decides first (a One-Time Filter), so an idle
// store pays one probe per tick instead of one per partition. Its rows are
// (partition, rows read, oldest due time).
func boundedDueSQL(sh dueShape) string {
	if sh.timer {
		sh.rows = strings.ReplaceAll(sh.rows, "{PART}", " AND "+sh.due+" > COALESCE($7::bigint, -9223372036854775808){PART}")
	}
	gate := `SELECT ` + sh.part + ` AS part, ` + sh.due + ` AS due ` + strings.ReplaceAll(sh.rows, "{PART}", "")
	gate += ` ORDER BY ` + sh.gateOrder + ` LIMIT 1`
	each := `SELECT ` + sh.due + ` AS due ` + strings.ReplaceAll(sh.rows, "{PART}", " AND "+sh.part+" = part.k")
	if sh.partOrdered {
		each += ` ORDER BY ` + sh.due
	}
	each += ` LIMIT $6`
	return `WITH gate AS MATERIALIZED (` + gate + `)
SELECT part.k::smallint, x.n, LEAST(x.oldest, (SELECT gate.due FROM gate WHERE gate.part = part.k))
FROM generate_series(0, $5::int - 1) part(k)
CROSS JOIN LATERAL (SELECT count(*) AS n, min(d.due) AS oldest FROM (` + each + `) d) x
WHERE x.n > 0 AND EXISTS (SELECT 1 FROM gate)`
}

// dueLimit is the $6 of a bounded Due statement for cap: one more row than
// the cap (so that Capped means more are due), or nil (no limit) for 0.
func dueLimit(limit int) any {
	if limit <= 0 {
		return nil
	}
	return limit + 1
}

// capDue applies cap to counts of up to cap+1 rows read: a count past the
// cap becomes the cap, Capped.
func capDue(due []workers.Due, limit int) []workers.Due {
	if limit <= 0 {
		return due
	}
	for i := range due {
		if due[i].Count > int64(limit) {
			due[i].Count, due[i].Capped = int64(limit), true
		}
	}
	return due
}

// dueRead runs a bounded Due statement (boundedDueSQL) with
// dbutil.PlannerSettings, in one round trip (dbutil.ScopedRead): its limits
// bound the rows read only if each partition is read in index order. The
// planner estimates a partition's due rows as an even share of all (200 of
// 50,000 over 256 partitions) and took a bitmap scan and a sort, which read
// every due row of the partition before the limit: all 100,000 of a
// backlog in one partition. The sorts it turns off would make JIT compile
// the statement (tens of milliseconds), so JIT is off too.
func dueRead(ctx context.Context, q workers.Querier, sql string, args []any, read func(pgx.Rows) error) error {
	return dbutil.MapErr(dbutil.ScopedRead(ctx, q, dbutil.PlannerSettings, sql, args, read), "due partitions")
}

// dueExec runs a bounded Due statement (boundedDueSQL) with $1 first (the
// time bound; for the pending cancel groups, whether only flagged ones) and
// the filter's parameters as dueExecFilterSQL takes them.
func dueExec(ctx context.Context, q workers.Querier, req workers.DueRequest, sh dueShape, first any) ([]workers.Due, error) {
	ns, tk, tv := actions.FilterParams(req.Filter)
	var due []workers.Due
	args := []any{first, ns, tk, tv, int(req.Store.Partitions()), dueLimit(req.Cap)}
	if sh.timer {
		var after *int64
		if req.AfterMs > 0 {
			after = &req.AfterMs
		}
		args = append(args, after)
	}
	err := dueRead(ctx, q, req.SQL(boundedDueSQL(sh)), args,
		func(rows pgx.Rows) (err error) {
			due, err = workers.CollectDue(rows)
			return err
		})
	return capDue(due, req.Cap), err
}

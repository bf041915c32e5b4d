package scanners

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
)

// auditCase is one reason a row that looks due cannot be processed: a SQL
// predicate on the audited rows. Cases are checked in order; a row counts
// for the first that holds.
type auditCase struct {
	reason string
	pred   string
}

// audit counts the rows of from (a FROM … WHERE <looks due> clause, {AT}
// standing for the time at), at most AuditCap+1 of them, by the first case
// each matches, and returns a list query per case found. cols are the
// columns the list queries show. req.Filter applies to the execution from
// joins as exec (its alias, "" when the rows have no execution to filter
// by). The count takes the time and the filter's values as parameters (one
// statement whatever the time: the statement cache keeps it), the list
// queries (for an operator's psql) as literals.
func audit(ctx context.Context, q workers.Querier, req workers.DueRequest, at int64, cols, from, exec string, cases []auditCase) ([]workers.Unprocessable, error) {
	var args []any
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	listFrom := strings.ReplaceAll(from, "{AT}", strconv.FormatInt(at, 10))
	if strings.Contains(from, "{AT}") {
		from = strings.ReplaceAll(from, "{AT}", param(at)+"::bigint")
	}
	if !req.Filter.IsZero() && exec != "" {
		ns, tk, tv := actions.FilterParams(req.Filter)
		pn, pk, pv := param(ns), param(tk), param(tv)
		from += ` AND (` + pn + `::text IS NULL OR ` + exec + `.raw_fields->>'namespace' = ` + pn + `::text)` +
			` AND (` + pk + `::text IS NULL OR ` + exec + `.raw_fields->'tags'->>` + pk + `::text = ` + pv + `::text)`
		listFrom += filterLiterals(req.Filter, exec)
	}
	var b strings.Builder
	b.WriteString("SELECT x.why, count(*) FROM (SELECT CASE")
	for i, c := range cases {
		fmt.Fprintf(&b, " WHEN (%s) IS TRUE THEN %d", c.pred, i)
	}
	b.WriteString(" END AS why " + from + " LIMIT " + param(pipeline.AuditCap+1) + ") x GROUP BY 1")
	type found struct {
		why *int
		n   int64
	}
	// Without parallel workers or JIT (dbutil.BoundedSettings), which
	// cost more than the read: at 10,000,000 executions the
	// delayed_promoter's audit was estimated past jit_above_cost and
	// compiled: 28-35 ms on a new connection for a read of 0.1 ms. Bitmap scans
	// stay allowed: a from clause with an OR (the delayed_promoter's)
	// needs one to read by index at all; without it that audit read all
	// of ff_exec_core (215 ms on 1,000,000 executions).
	var got []found
	err := dbutil.ScopedRead(ctx, q, dbutil.BoundedSettings, req.SQL(b.String()), args, func(rows pgx.Rows) error {
		var err error
		got, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (found, error) {
			var f found
			return f, r.Scan(&f.why, &f.n)
		})
		return err
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "counting unprocessable rows")
	}
	counts := make([]int64, len(cases))
	var read int64
	for _, f := range got {
		read += f.n
		if f.why != nil {
			counts[*f.why] = f.n
		}
	}
	var out []workers.Unprocessable
	for i, c := range cases {
		if counts[i] == 0 {
			continue
		}
		list := "SELECT " + cols + " " + listFrom
		for _, earlier := range cases[:i] {
			list += " AND (" + earlier.pred + ") IS NOT TRUE"
		}
		list += " AND (" + c.pred + ") IS TRUE"
		out = append(out, workers.Unprocessable{Reason: c.reason, Count: counts[i], AtLeast: read > pipeline.AuditCap, List: req.SQL(list)})
	}
	return out, nil
}

// filterLiterals is f as a predicate on the execution aliased exec, its
// values written in as literals (E'…', which mean the same whatever the
// server's standard_conforming_strings): for list queries, never run by
// ffriver itself.
func filterLiterals(f ff.Filter, exec string) string {
	lit := func(s string) string {
		return "E'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
	}
	var out string
	if f.Namespace != "" {
		out += " AND " + exec + ".raw_fields->>'namespace' = " + lit(f.Namespace)
	}
	if f.InstanceTag != nil {
		out += " AND " + exec + ".raw_fields->'tags'->>" + lit(f.InstanceTag.Key) + " = " + lit(f.InstanceTag.Value)
	}
	return out
}

// outOfRange is the audit case of rows in partitions outside the schema's
// partition count, on column col.
func outOfRange(req workers.DueRequest, col string) auditCase {
	n := int(req.Store.Partitions())
	return auditCase{reason: fmt.Sprintf("partition outside 0..%d", n-1), pred: fmt.Sprintf("%s NOT BETWEEN 0 AND %d", col, n-1)}
}

// sqlList is a SQL list of string literals (constants of ffriver's
// alphabets only, never input).
func sqlList(vals ...string) string {
	return "('" + strings.Join(vals, "', '") + "')"
}

// knownPhases is lifecycle_phase's alphabet, the legacy "cancelled" included.
var knownPhases = sqlList(ff.PhaseSubmitted, ff.PhaseRunnable, ff.PhaseActive, ff.PhaseSuspended, ff.PhaseTerminal, ff.PhaseLegacyCancelled)

// knownEligibility is eligibility_state's alphabet.
var knownEligibility = sqlList(ff.EligibleNow, ff.EligibleNotUntilTime, ff.EligibleBlockedByDeps, ff.EligibleBlockedByOperator, ff.EligibleNotApplicable)

package ffview

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// maxJobs is the most River jobs the execution page lists.
const maxJobs = 200

// riverJob is one river_job row that acted on an execution.
type riverJob struct {
	ID                   int64
	Kind, State, Queue   string
	Attempt, MaxAttempts int
	CreatedAt            time.Time
	FinalizedAt          *time.Time
	// Output is the output the job recorded (river.RecordOutput), as JSON;
	// Error the last error of a failed attempt.
	Output, Error string
	// Why says how the job names the execution.
	Why string
}

// jobMatch is one way a River job's args name an execution: a containment
// (args @> JSON) that River's GIN index on river_job.args serves.
type jobMatch struct {
	kinds []string
	args  map[string]any
	why   string
}

// jobMatches are the ways River jobs name execution e (its text id, its
// UUID and flow) in their args (package jobs):
//
//   - ff.expire_attempt, ff.promote_delayed, ff.expire_deadline: {"id": ID};
//   - ff.advance of e's completion: {"upstream": ID};
//   - ff.advance into e's own edge group: {"downstream": UUID, "flow_id": FLOW};
//   - ff.cancel_group and ff.reconcile_group of e's own edge group, and of
//     the groups e is an upstream of (a sibling cancel of e comes from one
//     of those): {"downstream_eid": UUID, "flow_id": FLOW};
//   - ff.dispatch_completion of e's completion events: {"event_id": N}.
func jobMatches(e *executions.Execution, downstreams []uuid.UUID, completionEvents []int64) []jobMatch {
	id := e.ID.String()
	m := []jobMatch{
		{[]string{jobs.KindExpireAttempt, jobs.KindPromoteDelayed, jobs.KindExpireDeadline}, map[string]any{"id": id}, "this execution"},
		{[]string{jobs.KindAdvance}, map[string]any{"upstream": id}, "its completion, cascading"},
	}
	if e.FlowID != nil {
		m = append(m,
			jobMatch{[]string{jobs.KindAdvance}, map[string]any{"downstream": e.ID.UUID, "flow_id": *e.FlowID}, "an upstream's completion into its edge group"},
			jobMatch{[]string{jobs.KindCancelGroup, jobs.KindReconcileGroup}, map[string]any{"downstream_eid": e.ID.UUID, "flow_id": *e.FlowID}, "its edge group's siblings"})
		for _, d := range downstreams {
			m = append(m, jobMatch{[]string{jobs.KindCancelGroup, jobs.KindReconcileGroup},
				map[string]any{"downstream_eid": d, "flow_id": *e.FlowID}, "the siblings of downstream " + d.String()})
		}
	}
	for _, ev := range completionEvents {
		m = append(m, jobMatch{[]string{jobs.KindDispatchCompletion}, map[string]any{"event_id": ev}, "its completion event " + strconv.FormatInt(ev, 10)})
	}
	return m
}

// jobsFor returns the River jobs that acted on an execution (jobMatches),
// oldest first, at most maxJobs, in one read of River's GIN index on
// river_job.args (jobsSQL). Jobs River's cleaner deleted (completed ones
// after --completed-retention) are gone.
func (v *View) jobsFor(ctx context.Context, matches []jobMatch) ([]riverJob, error) {
	sql, args, err := jobsSQL(v.riverSchema, matches)
	if err != nil {
		return nil, err
	}
	rows, err := v.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, dbutil.MapErr(err, "River jobs of the execution")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (riverJob, error) {
		var j riverJob
		var attempt, maxAttempts int16
		err := r.Scan(&j.ID, &j.Kind, &j.State, &j.Queue, &attempt, &maxAttempts, &j.CreatedAt, &j.FinalizedAt, &j.Output, &j.Error, &j.Why)
		j.Attempt, j.MaxAttempts = int(attempt), int(maxAttempts)
		return j, err
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "River jobs of the execution")
	}
	return out, nil
}

// jobsSQL is jobsFor's statement over River's tables in rs, with its
// arguments. River's index on river_job.args is a GIN index, and every scan
// of one reads its whole pending list (the rows inserted since it was last
// merged: up to gin_pending_list_limit, 4 MB by default, between
// vacuums). A containment per match, OR'ed, scanned the index once per
// match: on a River keeping 565,000 completed item jobs with a full pending
// list, 15-27 ms each, the page's read 253 ms at p50 (ffctl bench scale,
// 10,000,000 executions, the 2-core VM). So the rows are found by one
// jsonpath predicate that ORs the matches (args @@, which the same index
// serves in one scan), and each match's containment and kinds then say
// which matched and why; rows no match claims (a kind the match does not
// name) are left out. The first maxJobs by id, ordered after the rows are
// found (MATERIALIZED): the statement is prepared, and once Postgres took
// its generic plan it read River's primary key in id order instead,
// filtering every job until maxJobs matched (565,064 rows, 1.3 s for one
// execution, on that River).
func jobsSQL(rs dbutil.Schema, matches []jobMatch) (string, []any, error) {
	var paths []string
	args := []any{nil} // $1: the jsonpath
	whyCase := "CASE"
	for _, m := range matches {
		path, err := matchPath(m.args)
		if err != nil {
			return "", nil, err
		}
		paths = append(paths, path)
		b, err := json.Marshal(m.args)
		if err != nil {
			return "", nil, err
		}
		args = append(args, string(b), m.kinds, m.why)
		n := len(args)
		whyCase += " WHEN args @> $" + strconv.Itoa(n-2) + "::jsonb AND kind = ANY($" + strconv.Itoa(n-1) + "::text[]) THEN $" + strconv.Itoa(n)
	}
	whyCase += " END"
	args[0] = strings.Join(paths, " || ")
	return rs.SQL(`WITH j AS MATERIALIZED (
		  SELECT id, kind, state::text, queue, attempt, max_attempts, created_at, finalized_at,
		         COALESCE(metadata->>'output', '') AS output, COALESCE(errors[array_upper(errors, 1)]->>'error', '') AS error,
		         ` + whyCase + ` AS why
		  FROM {S}river_job WHERE args @@ $1::jsonpath)
		SELECT id, kind, state, queue, attempt, max_attempts, created_at, finalized_at, output, error, why
		FROM j WHERE why IS NOT NULL
		ORDER BY id LIMIT ` + strconv.Itoa(maxJobs)), args, nil
}

// matchPath is the jsonpath predicate of a match's args: each key equal
// to its value, ANDed. Keys are quoted and values written as JSON, which
// jsonpath reads as literals.
func matchPath(m map[string]any) (string, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var conds []string
	for _, k := range keys {
		key, err := json.Marshal(k)
		if err != nil {
			return "", err
		}
		val, err := json.Marshal(m[k])
		if err != nil {
			return "", err
		}
		conds = append(conds, "$."+string(key)+" == "+string(val))
	}
	return "(" + strings.Join(conds, " && ") + ")", nil
}

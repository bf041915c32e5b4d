package ffview

import (
	"context"
	"encoding/json"
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
// oldest first, at most maxJobs. Each match is a GIN-indexed containment
// on river_job.args. Jobs River's cleaner deleted (completed ones after
// --completed-retention) are gone.
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
// arguments: one containment per match, OR'ed (a BitmapOr of
// river_job_args_index ranges), the first maxJobs by id.
func jobsSQL(rs dbutil.Schema, matches []jobMatch) (string, []any, error) {
	var ors []string
	var args []any
	whyCase := "CASE"
	for _, m := range matches {
		b, err := json.Marshal(m.args)
		if err != nil {
			return "", nil, err
		}
		args = append(args, string(b), m.kinds)
		a, k := "$"+strconv.Itoa(len(args)-1), "$"+strconv.Itoa(len(args))
		cond := "(args @> " + a + "::jsonb AND kind = ANY(" + k + "::text[]))"
		ors = append(ors, cond)
		args = append(args, m.why)
		whyCase += " WHEN " + cond + " THEN $" + strconv.Itoa(len(args))
	}
	whyCase += " END"
	return rs.SQL(`SELECT id, kind, state::text, queue, attempt, max_attempts, created_at, finalized_at,
		       COALESCE(metadata->>'output', ''), COALESCE(errors[array_upper(errors, 1)]->>'error', ''), ` + whyCase + `
		FROM {S}river_job WHERE ` + strings.Join(ors, " OR ") + `
		ORDER BY id LIMIT ` + strconv.Itoa(maxJobs)), args, nil
}

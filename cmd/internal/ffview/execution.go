package ffview

import (
	"net/http"
	"net/url"
	"unicode/utf8"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// maxEvents is the most outbox events the execution page's timeline shows
// (the newest; executions.Store.History).
const maxEvents = 1000

// maxShownBytes is how much of a payload or result the page prints.
const maxShownBytes = 4096

// executionPage is the data of templates/execution.html.
type executionPage struct {
	E        *executions.Execution
	Attempts []executions.Attempt
	// Timeline is the execution's lease and completion events, oldest
	// first (executions.Store.History).
	Timeline []executions.HistoryEvent
	// TimelineFull is false when the execution has more than maxEvents.
	TimelineFull bool
	Jobs         []riverJob
	JobsFull     bool
	// Flow, Group, Upstreams and Downstreams: the execution's flow, its own
	// edge group (nil without dependencies) and its edges.
	Flow                    *executions.Flow
	Group                   *executions.EdgeGroup
	Upstreams, Downstreams  []edgeEnd
	Payload, Result         shownBytes
	NowMs                   int64
	LeaseLive, LeaseExpired bool
	CanCancel, CanRevoke    bool
	RiverUI                 string
	// Done is the action just applied ("cancelled", "revoked"), or "".
	Done string
}

// edgeEnd is the other end of one of the execution's edges.
type edgeEnd struct {
	ID      ff.ExecutionID
	State   string
	Edge    executions.Edge
	Present bool
	// Group is a downstream's edge group; CancelledUs is set when that
	// group, satisfied with cancel_remaining, is what cancelled this
	// execution as a sibling.
	Group       *executions.EdgeGroup
	CancelledUs bool
}

// shownBytes is a payload or result as the page prints it: its text when
// it is UTF-8, cut at maxShownBytes.
type shownBytes struct {
	Len       int
	Text      string
	Binary    bool
	Truncated bool
}

func showBytes(b []byte) shownBytes {
	s := shownBytes{Len: len(b)}
	if !utf8.Valid(b) {
		s.Binary = true
		return s
	}
	if len(b) > maxShownBytes {
		b, s.Truncated = b[:maxShownBytes], true
		for !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
	}
	s.Text = string(b)
	return s
}

// pathID checks r's query parameters (allowed) and parses the {id} of
// the path: an ff.ExecutionID in its {fp:N}:<uuid> form, in this schema's
// partitions.
func (v *View) pathID(r *http.Request, allowed ...string) (ff.ExecutionID, url.Values, error) {
	q, err := query(r, allowed...)
	if err != nil {
		return ff.ExecutionID{}, nil, err
	}
	id, err := ff.ParseExecutionID(r.PathValue("id"))
	if err != nil {
		return ff.ExecutionID{}, nil, err
	}
	return id, q, v.store.Partitions().CheckID(id)
}

// execution serves GET /ff/executions/{id}: the state columns, attempts,
// the timeline of outbox events, the River jobs that acted on it, and its
// flow and edge groups.
//
// The timeline is executions.Store.History: the lease and completion
// events ordered by occurred_at_ms, the time each transition was taken
// while holding the execution's row lock, so for one execution the order
// its transactions committed in (a lease event before the completion event
// of the same transaction).
func (v *View) execution() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, q, err := v.pathID(r, "done")
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		ctx := r.Context()
		e, err := v.store.Get(ctx, id)
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		p := executionPage{E: e, NowMs: v.store.NowMs(), RiverUI: v.riverUI, Payload: showBytes(e.Payload), Result: showBytes(e.Result)}
		// ?done= is where an action's redirect lands: the page says what
		// was done (any other value is not shown).
		for _, a := range actions {
			if q.Get("done") == a.Done {
				p.Done = a.Done
			}
		}
		if p.Attempts, err = v.store.Attempts(ctx, id); err != nil {
			v.failErr(w, r, err)
			return
		}
		if p.Timeline, err = v.store.History(ctx, id, maxEvents+1); err != nil {
			v.failErr(w, r, err)
			return
		}
		p.TimelineFull = len(p.Timeline) <= maxEvents
		if !p.TimelineFull {
			p.Timeline = p.Timeline[1:]
		}
		if leaseLive(e) {
			p.LeaseLive, p.LeaseExpired = true, *e.Attempt.LeaseExpiresAtMs <= p.NowMs
		}
		p.CanCancel = actions["cancel"].allowed(e, p.NowMs)
		p.CanRevoke = actions["revoke"].allowed(e, p.NowMs)
		var downstreams []uuid.UUID
		if e.FlowID != nil {
			if p.Flow, err = v.store.GetFlow(ctx, *e.FlowID); err != nil {
				v.failErr(w, r, err)
				return
			}
			downstreams = p.relate(id)
		}
		var completions []int64
		for _, h := range p.Timeline {
			if h.Stream == executions.StreamCompletion {
				completions = append(completions, h.EventID)
			}
		}
		if p.Jobs, err = v.jobsFor(ctx, jobMatches(e, downstreams, completions)); err != nil {
			v.failErr(w, r, err)
			return
		}
		p.JobsFull = len(p.Jobs) < maxJobs
		v.render(w, r, http.StatusOK, "execution", "executions", "Execution "+id.String(), p)
	}
}

// relate fills the execution's edge group and the ends of its edges from
// its flow, and returns its downstreams.
func (p *executionPage) relate(id ff.ExecutionID) []uuid.UUID {
	states := map[uuid.UUID]string{}
	for _, m := range p.Flow.Members {
		states[m.ID.UUID] = m.PublicState
	}
	end := func(u uuid.UUID, e executions.Edge) edgeEnd {
		s, ok := states[u]
		return edgeEnd{ID: ff.ExecutionID{Partition: p.Flow.Partition, UUID: u}, State: s, Edge: e, Present: ok}
	}
	var downstreams []uuid.UUID
	for _, e := range p.Flow.Edges {
		switch id.UUID {
		case e.Downstream:
			p.Upstreams = append(p.Upstreams, end(e.Upstream, e))
		case e.Upstream:
			p.Downstreams = append(p.Downstreams, end(e.Downstream, e))
			downstreams = append(downstreams, e.Downstream)
		}
	}
	groups := map[uuid.UUID]*executions.EdgeGroup{}
	for i := range p.Flow.Groups {
		groups[p.Flow.Groups[i].Downstream] = &p.Flow.Groups[i]
	}
	p.Group = groups[id.UUID]
	sibling := p.E.CancellationReason != nil && *p.E.CancellationReason == executions.SiblingCancelReason
	for i := range p.Downstreams {
		d := &p.Downstreams[i]
		d.Group = groups[d.ID.UUID]
		d.CancelledUs = sibling && d.Group != nil && d.Group.State == executions.GroupSatisfied &&
			d.Group.Policy.OnSatisfied == executions.CancelRemaining
	}
	return downstreams
}

package ffview

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// flowPage is the data of templates/flow.html.
type flowPage struct {
	Flow  *executions.Flow
	Graph graph
	// Groups are the flow's edge groups with their downstream's node.
	Groups []groupRow
	// States counts the members by public state.
	States []stateCount
}

type groupRow struct {
	Node  *node
	Group executions.EdgeGroup
}

type stateCount struct {
	State string
	N     int
}

// Graph geometry, in SVG pixels: nodes are boxes in columns by depth.
const (
	nodeW, nodeH = 300, 40
	colGap       = 90
	rowGap       = 14
	margin       = 16
)

// graph is a flow laid out for SVG: one column per depth (the longest
// path from an execution without upstreams), each column ordered to keep
// edges short (the mean row of a node's upstreams), so a flow of a
// hundred executions stays readable: the page scrolls, nothing overlaps.
type graph struct {
	Width, Height int
	// NodeW and NodeH are every node's box.
	NodeW, NodeH int
	Nodes        []*node
	Edges        []edge
}

// node is one execution in the graph.
type node struct {
	ID         ff.ExecutionID
	Short      string
	State      string
	Lane       string
	X, Y       int
	Depth, Row int
	Group      *executions.EdgeGroup
	// Sibling is set on an execution an edge group's policy cancelled
	// (cancel_remaining once satisfied); CancelPending on one listed for
	// that cancel and not yet reached by the dispatcher.
	Sibling       bool
	CancelPending bool
	// Missing is set for an edge's end that is not among the listed
	// members (a flow beyond executions.MaxListLimit).
	Missing bool
	Reason  string
	// Sub is the box's second line: its edge group in brief, else its
	// lane.
	Sub string
}

// groupBrief is an edge group on one short line: "quorum 2 of 50 ·
// satisfied · 2 ok 0 bad 48 open" (skipped and open upstreams only when
// there are some).
func groupBrief(g *executions.EdgeGroup) string {
	n := g.Success + g.Fail + g.Skip + g.Running
	kind := g.Policy.Kind
	switch g.Policy.Kind {
	case executions.PolicyQuorum:
		kind = fmt.Sprintf("quorum %d of %d", g.Policy.K, n)
	case executions.PolicyAllOf, executions.PolicyAnyOf:
		kind = fmt.Sprintf("%s %d", g.Policy.Kind, n)
	}
	brief := fmt.Sprintf("%s · %s · %d ok %d bad", kind, g.State, g.Success, g.Fail)
	if g.Skip > 0 {
		brief += fmt.Sprintf(" %d skip", g.Skip)
	}
	if g.Running > 0 {
		brief += fmt.Sprintf(" %d open", g.Running)
	}
	return brief
}

// edge is one dependency drawn from its upstream's right side to its
// downstream's left side.
type edge struct {
	Path string
	// Outcome is the upstream outcome the edge counted, "" while pending.
	Outcome string
}

// flow serves GET /ff/flows/{flow}: the flow's executions as a graph, its
// edge groups (policy, counts, pending / satisfied / impossible) and its
// members; cancelled siblings are marked.
func (v *View) flow() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := query(r); err != nil {
			v.failErr(w, r, err)
			return
		}
		s := r.PathValue("flow")
		id, err := uuid.Parse(s)
		if err != nil || len(s) != 36 {
			v.failErr(w, r, ff.Validationf("flow", "%s is not a flow UUID", ff.Excerpt(s)))
			return
		}
		f, err := v.store.GetFlow(r.Context(), id)
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		p := flowPage{Flow: f, Graph: layout(f)}
		byID := map[uuid.UUID]*node{}
		for _, n := range p.Graph.Nodes {
			byID[n.ID.UUID] = n
		}
		for _, g := range f.Groups {
			p.Groups = append(p.Groups, groupRow{Node: byID[g.Downstream], Group: g})
		}
		counts := map[string]int{}
		for _, m := range f.Members {
			counts[m.PublicState]++
		}
		for _, st := range executions.PublicStates() {
			if counts[st] > 0 {
				p.States = append(p.States, stateCount{st, counts[st]})
			}
		}
		v.render(w, r, http.StatusOK, "flow", "executions", "Flow "+id.String(), p)
	}
}

// layout places f's members and edges.
func layout(f *executions.Flow) graph {
	nodes := map[uuid.UUID]*node{}
	var order []*node
	add := func(u uuid.UUID) *node {
		if n, ok := nodes[u]; ok {
			return n
		}
		id := ff.ExecutionID{Partition: f.Partition, UUID: u}
		n := &node{ID: id, Short: u.String()[:8], State: "not listed", Missing: true}
		nodes[u] = n
		order = append(order, n)
		return n
	}
	// Oldest first, so that ties keep creation order.
	for i := len(f.Members) - 1; i >= 0; i-- {
		m := f.Members[i]
		n := add(m.ID.UUID)
		n.Missing, n.State, n.Lane = false, m.PublicState, m.Lane
		if m.CancellationReason != nil {
			n.Reason = *m.CancellationReason
			n.Sibling = *m.CancellationReason == executions.SiblingCancelReason
		}
	}
	for i := range f.Groups {
		g := &f.Groups[i]
		add(g.Downstream).Group = g
		for _, m := range g.CancelMembers {
			if u, err := uuid.Parse(m); err == nil {
				if n, ok := nodes[u]; ok && n.State != ff.PublicCancelled {
					n.CancelPending = true
				}
			}
		}
	}
	for _, n := range order {
		n.Sub = n.Lane
		if n.Group != nil {
			n.Sub = groupBrief(n.Group)
		}
	}
	ups := map[*node][]*node{}
	downs := map[*node][]*node{}
	for _, e := range f.Edges {
		u, d := add(e.Upstream), add(e.Downstream)
		ups[d] = append(ups[d], u)
		downs[u] = append(downs[u], d)
	}
	// Depth: the longest path from a node without upstreams (Kahn's
	// order; the store refuses cycles).
	indeg := map[*node]int{}
	for _, n := range order {
		indeg[n] = len(ups[n])
	}
	queue := []*node{}
	for _, n := range order {
		if indeg[n] == 0 {
			queue = append(queue, n)
		}
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, d := range downs[n] {
			d.Depth = max(d.Depth, n.Depth+1)
			if indeg[d]--; indeg[d] == 0 {
				queue = append(queue, d)
			}
		}
	}
	var cols [][]*node
	for _, n := range order {
		for len(cols) <= n.Depth {
			cols = append(cols, nil)
		}
		cols[n.Depth] = append(cols[n.Depth], n)
	}
	// Rows: column 0 in creation order, each later column by the mean row
	// of its upstreams (the barycenter heuristic), ties by creation.
	for c, col := range cols {
		if c > 0 {
			mean := func(n *node) float64 {
				sum := 0
				for _, u := range ups[n] {
					sum += u.Row
				}
				return float64(sum) / float64(max(1, len(ups[n])))
			}
			slices.SortStableFunc(col, func(a, b *node) int { return cmp.Compare(mean(a), mean(b)) })
		}
		for r, n := range col {
			n.Row = r
		}
	}
	g := graph{Nodes: order, NodeW: nodeW, NodeH: nodeH}
	rows := 0
	for c, col := range cols {
		rows = max(rows, len(col))
		for _, n := range col {
			n.X = margin + c*(nodeW+colGap)
			n.Y = margin + n.Row*(nodeH+rowGap)
		}
	}
	g.Width = 2*margin + max(1, len(cols))*(nodeW+colGap) - colGap
	g.Height = 2*margin + max(1, rows)*(nodeH+rowGap) - rowGap
	for _, e := range f.Edges {
		u, d := nodes[e.Upstream], nodes[e.Downstream]
		x1, y1 := u.X+nodeW, u.Y+nodeH/2
		x2, y2 := d.X, d.Y+nodeH/2
		mid := (x1 + x2) / 2
		ed := edge{Path: fmt.Sprintf("M%d,%d C%d,%d %d,%d %d,%d", x1, y1, mid, y1, mid, y2, x2, y2)}
		if e.UpstreamOutcome != nil {
			ed.Outcome = *e.UpstreamOutcome
		}
		g.Edges = append(g.Edges, ed)
	}
	return g
}

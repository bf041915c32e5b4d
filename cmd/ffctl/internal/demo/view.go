package demo

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ffriver/ffriver/ff"
)

// view draws the live view once a second: redrawn in place on a terminal,
// one compact line otherwise.
type view struct {
	out      io.Writer
	terminal bool
	schema   string
	uiURL    string
	duration time.Duration
	// lines the last terminal draw took, to move back over them.
	lines int
	notes []string
}

func newView(out io.Writer, terminal bool, schema, uiURL string, duration time.Duration) *view {
	return &view{out: out, terminal: terminal, schema: schema, uiURL: uiURL, duration: duration}
}

// note adds a line under the view (or prints it, off a terminal).
func (v *view) note(s string) {
	if v.terminal {
		v.notes = append(v.notes, s)
		return
	}
	fmt.Fprintf(v.out, "note: %s\n", s)
}

// end leaves the last drawing on screen.
func (v *view) end() { v.lines = 0 }

func (v *view) draw(s *Snapshot, elapsed time.Duration) {
	if !v.terminal {
		fmt.Fprintln(v.out, compactLine(s, elapsed))
		return
	}
	var b bytes.Buffer
	if v.lines > 0 {
		// Back to the first line of the last drawing, then clear below.
		fmt.Fprintf(&b, "\x1b[%dF\x1b[J", v.lines)
	}
	body := v.page(s, elapsed)
	for _, n := range v.notes {
		body += n + "\n"
	}
	b.WriteString(body)
	v.lines = strings.Count(body, "\n")
	_, _ = v.out.Write(b.Bytes())
}

// page is the terminal view.
func (v *view) page(s *Snapshot, elapsed time.Duration) string {
	var b strings.Builder
	ui := ""
	if v.uiURL != "" {
		ui = "   River UI " + v.uiURL
	}
	fmt.Fprintf(&b, "ffriver demo  %s / %s   schema %s%s\n\n", elapsed.Round(time.Second), v.duration, v.schema, ui)
	fmt.Fprintf(&b, "%-36s%s\n", "lease events (subscribe.Leases)", "completions (subscribe.Completions)")
	lt, oc := LeaseTypes(), Outcomes()
	for i := range lt {
		fmt.Fprintf(&b, "  %-12s%8d%14s  %-12s%8d\n", lt[i], s.Leases[lt[i]], "", oc[i], s.Completions[oc[i]])
	}
	for _, w := range s.Waiting {
		fmt.Fprintf(&b, "  waiting: %s\n", w)
	}
	b.WriteString("\n")
	writeScanners(&b, s)
	b.WriteString("\n")
	fmt.Fprintf(&b, "executions  %s\n", statesLine(s.States))
	fmt.Fprintf(&b, "workload    %s\n", workloadLine(s.Workload))
	return b.String()
}

// compactLine is one line of the view, for a log or a pipe.
func compactLine(s *Snapshot, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%3ds] leases", int(elapsed.Round(time.Second).Seconds()))
	for _, t := range LeaseTypes() {
		fmt.Fprintf(&b, " %s=%d", t, s.Leases[t])
	}
	b.WriteString(" | completions")
	for _, o := range Outcomes() {
		fmt.Fprintf(&b, " %s=%d", o, s.Completions[o])
	}
	var backlog int64
	atLeast := ""
	for _, sc := range s.Scanners {
		backlog += sc.Backlog
		if sc.BacklogAtLeast {
			atLeast = ">="
		}
	}
	if len(s.Waiting) > 0 {
		w := s.Waiting[0]
		fmt.Fprintf(&b, " | waiting on pid %d (xid %d, open %s)", w.PID, w.Xact, w.Age.Round(time.Second))
	}
	fmt.Fprintf(&b, " | backlog=%s%d | processed", atLeast, backlog)
	for _, sc := range s.Scanners {
		if n := sc.Processed(); n > 0 {
			fmt.Fprintf(&b, " %s=%d", strings.ReplaceAll(sc.Name, " ", "_"), n)
		}
	}
	return b.String()
}

// writeScanners writes the scanner table: backlog, ticks, scans, actions.
func writeScanners(w io.Writer, s *Snapshot) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "scanner\titem job\tbacklog\tticks\tscans\tactions (item jobs by River job output)\n")
	for _, sc := range s.Scanners {
		backlog, ticks, scans := fmt.Sprint(sc.Backlog), fmt.Sprint(sc.Ticks), fmt.Sprint(sc.Scans)
		if sc.BacklogAtLeast {
			backlog = "at least " + backlog
		}
		if sc.Name == CascadeName {
			backlog, ticks, scans = "-", "-", "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", sc.Name, sc.ItemKind, backlog, ticks, scans, actionsLine(sc.Actions))
	}
	_ = tw.Flush()
}

// actionsLine lists outcomes, processed first, then by name.
func actionsLine(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(m))
	slices.SortStableFunc(keys, func(a, b string) int {
		switch {
		case a == processedOutcome:
			return -1
		case b == processedOutcome:
			return 1
		}
		return 0
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// statesLine lists the executions by public state, live states first.
func statesLine(m map[string]int64) string {
	order := []string{ff.PublicWaiting, ff.PublicDelayed, ff.PublicWaitingChildren, ff.PublicActive,
		ff.PublicCompleted, ff.PublicFailed, ff.PublicExpired, ff.PublicCancelled, ff.PublicSkipped}
	var parts []string
	var total int64
	for _, k := range order {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
		total += m[k]
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(order, k) {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
			total += m[k]
		}
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

func workloadLine(w WorkloadStats) string {
	return fmt.Sprintf("%d flows, worker crashes %d, peer reclaims %d, operator revokes %d, taken-away leases noticed %d",
		w.Flows, w.Crashes, w.PeerReclaims, w.OperatorRevokes, w.Fenced)
}

// writeSummary prints the final table.
func writeSummary(w io.Writer, sum *Summary) {
	s := &sum.Snapshot
	fmt.Fprintf(w, "\nSummary: %s of workload on schema %s", sum.Elapsed, sum.Schema)
	if sum.Interrupted {
		fmt.Fprint(w, " (interrupted)")
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "stream\tevent\tcount\twhat produced it\n")
	why := map[string]string{
		"leases " + ff.LeaseAcquired:         "Claim",
		"leases " + ff.LeaseRenewed:          "Renew by workers holding long work",
		"leases " + ff.LeaseExpired:          "attempt_timeout (crashed workers), execution_deadline (leased past the deadline)",
		"leases " + ff.LeaseReclaimed:        "Reclaim by a peer, before the scanner",
		"leases " + ff.LeaseRevoked:          "Complete, Fail, Delay, operator Revoke, sibling cancels",
		"completions " + ff.OutcomeSuccess:   "Complete",
		"completions " + ff.OutcomeFailed:    "Fail without retries left, or permanent",
		"completions " + ff.OutcomeExpired:   "attempt_timeout without retries left, execution_deadline",
		"completions " + ff.OutcomeCancelled: "edge_cancel_dispatcher (any-of / quorum with cancel_remaining)",
		"completions " + ff.OutcomeSkipped:   "flow cascade (an impossible all-of group, and its downstream)",
	}
	for _, t := range LeaseTypes() {
		fmt.Fprintf(tw, "leases\t%s\t%d\t%s\n", t, s.Leases[t], why["leases "+t])
	}
	for _, o := range Outcomes() {
		fmt.Fprintf(tw, "completions\t%s\t%d\t%s\n", o, s.Completions[o], why["completions "+o])
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	writeScanners(w, s)
	fmt.Fprintf(w, "\nexecutions  %s\n", statesLine(s.States))
	fmt.Fprintf(w, "workload    %s\n", workloadLine(s.Workload))
	if sum.UIURL != "" {
		fmt.Fprintf(w, "River UI    was served at %s while the demo ran\n", sum.UIURL)
	}
	if sum.ViewURL != "" {
		fmt.Fprintf(w, "executions  were served at %s while the demo ran\n", sum.ViewURL)
	}
	switch {
	case len(sum.Missing) == 0:
		fmt.Fprintf(w, "\nEvery lease event type and every completion outcome was delivered by the streams.\n")
	case sum.Interrupted:
		fmt.Fprintf(w, "\nNot seen before the interruption: %s.\n", strings.Join(sum.Missing, ", "))
	default:
		fmt.Fprintf(w, "\nNot seen: %s.\n", strings.Join(sum.Missing, ", "))
	}
}

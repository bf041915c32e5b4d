package leasecheck

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Model is the porcupine model of the lease protocol: one execution's state
// machine (Transition), partitioned by execution, so that porcupine checks
// each execution's history on its own.
func Model() porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Partition: PartitionByExecution,
		Init:      func() []any { return []any{State{}} },
		Step: func(state, input, output any) []any {
			next, _ := Transition(state.(State), input.(Input), output.(Output))
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		Equal: func(a, b any) bool { return a.(State) == b.(State) },
		Hash: func(state any) uint64 {
			h := fnv.New64a()
			fmt.Fprintf(h, "%+v", state.(State))
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			// The visualization also describes operations it made up
			// itself (nil input and output) when a partition's longest
			// legal prefix ends early.
			in, ok := input.(Input)
			out, ok2 := output.(Output)
			if !ok || !ok2 {
				return ""
			}
			return Describe(in, out)
		},
		DescribeState: func(state any) string { return state.(State).String() },
	}
}

// PartitionByExecution splits a history into one history per execution.
func PartitionByExecution(history []porcupine.Operation) [][]porcupine.Operation {
	idx := map[string]int{}
	var out [][]porcupine.Operation
	for _, op := range history {
		k := op.Input.(Input).Exec
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], op)
	}
	return out
}

// Describe renders an operation for the visualization and reports.
func Describe(in Input, out Output) string {
	if in.Mark != 0 {
		return in.Mark.String()
	}
	if in.Derived {
		if out.Events == nil {
			return "scanner (no events)"
		}
		return "scanner " + eventsString(out.Events)
	}
	var parts []string
	for i, st := range in.Steps {
		var r *Result
		if i < len(out.Results) {
			r = &out.Results[i]
		}
		parts = append(parts, describeStep(st, r, out.Unknown && !out.Resolved))
	}
	s := strings.Join(parts, " + ")
	if len(in.Steps) > 1 {
		s = "tx{" + s + "}"
	}
	switch {
	case out.RolledBack:
		s += " [rolled back by its client]"
	case out.Unknown && out.Resolved:
		s += " [unknown outcome, committed per the outbox]"
	case out.Unknown && len(out.Maybe) > 0:
		s += fmt.Sprintf(" [unknown outcome, perhaps one of %d transactions other calls fit too]", len(out.Maybe))
	case out.Unknown:
		s += " [unknown outcome, not in the outbox]"
	}
	return s
}

func describeStep(st Step, r *Result, unknown bool) string {
	var call string
	switch st.Kind {
	case OpCreate:
		call = "Create"
		switch {
		case st.Create.Blocked:
			call += " blocked"
		case st.Create.DelayUntil != 0:
			call += fmt.Sprintf(" until %d", st.Create.DelayUntil)
		}
		call += fmt.Sprintf(" retries %d", st.Create.MaxRetries)
		if st.Create.Deadline != 0 {
			call += fmt.Sprintf(" deadline %d", st.Create.Deadline)
		}
	case OpClaim, OpReclaim:
		call = fmt.Sprintf("%s(%s ttl %d)", st.Kind, st.Instance, st.TTL)
	case OpRenew:
		call = fmt.Sprintf("Renew(%s ttl %d)", st.Lease, st.TTL)
	case OpFail:
		call = fmt.Sprintf("Fail(%s permanent=%v)", st.Lease, st.Permanent)
	case OpDelay:
		call = fmt.Sprintf("Delay(%s until %d)", st.Lease, st.Until)
	case OpComplete, OpRelease:
		call = fmt.Sprintf("%s(%s)", st.Kind, st.Lease)
	default:
		call = st.Kind.String()
	}
	switch {
	case unknown:
		return call + " → ?"
	case r == nil:
		return call + " (not run)"
	case r.Err != OK:
		return call + " → " + r.Err.String()
	case r.Empty:
		return call + " → nothing"
	}
	switch st.Kind {
	case OpClaim, OpRenew, OpReclaim:
		return call + " → " + r.Lease.String()
	case OpFail:
		if r.Retried {
			return call + fmt.Sprintf(" → retry as a%d until %d", r.NextAttempt, r.DelayUntil)
		}
		return call + " → failed"
	}
	return call + " → ok"
}

func eventsString(tx *Tx) string {
	var parts []string
	for _, e := range tx.Lease {
		parts = append(parts, e.String())
	}
	for _, c := range tx.Completions {
		parts = append(parts, fmt.Sprintf("completion %s @%d", c.Outcome, c.AtMs))
	}
	return strings.Join(parts, ", ")
}

// Linearizability is porcupine's verdict on one execution's history.
type Linearizability struct {
	Exec   string
	Result porcupine.CheckResult
	// Ops are the execution's operations, by call time.
	Ops  []porcupine.Operation
	Info porcupine.LinearizationInfo
}

// CheckLinearizable runs porcupine over the whole history (the model
// partitions it by execution) and returns the executions whose history is
// not linearizable (Illegal) or could not be decided within timeout
// (Unknown), each checked again on its own for its visualization.
func CheckLinearizable(history []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, []Linearizability) {
	nm := Model()
	model := nm.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	if res == porcupine.Ok {
		return res, nil
	}
	// Find the partitions without a complete linearization.
	parts := PartitionByExecution(history)
	var bad []Linearizability
	partials := info.PartialLinearizations()
	for i, part := range parts {
		complete := false
		if i < len(partials) {
			for _, lin := range partials[i] {
				if len(lin) == len(part) {
					complete = true
				}
			}
		}
		if complete {
			continue
		}
		r, pinfo := porcupine.CheckOperationsVerbose(model, part, timeout)
		if r == porcupine.Ok {
			continue
		}
		ops := slices.Clone(part)
		slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmpInt(a.Call, b.Call) })
		bad = append(bad, Linearizability{Exec: part[0].Input.(Input).Exec, Result: r, Ops: ops, Info: pinfo})
	}
	return res, bad
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

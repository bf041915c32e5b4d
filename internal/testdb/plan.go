package testdb

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Explainer runs EXPLAIN: a pool, a connection or a transaction (one that
// set what the code sets before the statement, such as SET LOCAL).
type Explainer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PlanNode is one node of EXPLAIN (FORMAT JSON)'s plan.
type PlanNode struct {
	NodeType  string `json:"Node Type"`
	Relation  string `json:"Relation Name"`
	Index     string `json:"Index Name"`
	IndexCond string `json:"Index Cond"`
	Filter    string `json:"Filter"`
	// OneTimeFilter is a Result node's gate: false, and nothing below it
	// runs.
	OneTimeFilter string     `json:"One-Time Filter"`
	Plans         []PlanNode `json:"Plans"`
}

// Walk calls f on n and every node below it.
func (n PlanNode) Walk(f func(PlanNode)) {
	f(n)
	for _, c := range n.Plans {
		c.Walk(f)
	}
}

// String is the plan as an indented tree of node types, relations,
// indexes and conditions, for a test's failure message.
func (n PlanNode) String() string {
	var b strings.Builder
	var walk func(PlanNode, int)
	walk = func(n PlanNode, depth int) {
		b.WriteString(strings.Repeat("  ", depth) + n.NodeType)
		if n.Relation != "" {
			b.WriteString(" on " + n.Relation)
		}
		if n.Index != "" {
			b.WriteString(" using " + n.Index)
		}
		if n.IndexCond != "" {
			b.WriteString(" cond " + n.IndexCond)
		}
		if n.Filter != "" {
			b.WriteString(" filter " + n.Filter)
		}
		if n.OneTimeFilter != "" {
			b.WriteString(" one-time filter " + n.OneTimeFilter)
		}
		b.WriteString("\n")
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return b.String()
}

// Explain returns the plan of sql with args (EXPLAIN (FORMAT JSON), the
// planner's settings as q has them: enable_seqscan stays on).
func Explain(ctx context.Context, q Explainer, sql string, args ...any) (PlanNode, error) {
	var out []struct {
		Plan PlanNode `json:"Plan"`
	}
	var raw []byte
	if err := q.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		return PlanNode{}, fmt.Errorf("explain: %w", err)
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		return PlanNode{}, fmt.Errorf("explain: unexpected output %s: %v", raw, err)
	}
	return out[0].Plan, nil
}

// AssertNoSeqScan explains sql with args on q and fails tb when the plan
// reads any of tables by a sequential scan: the statement must read what it
// needs through an index or a bounded range. Seed the tables first (Seed)
// and analyze them, so that a sequential scan is what the planner would
// choose if no index fitted. It returns the plan for logging.
func AssertNoSeqScan(tb testing.TB, q Explainer, tables []string, sql string, args ...any) PlanNode {
	tb.Helper()
	plan, err := Explain(context.Background(), q, sql, args...)
	if err != nil {
		tb.Fatalf("%v\n%s", err, sql)
	}
	plan.Walk(func(n PlanNode) {
		if n.NodeType == "Seq Scan" && slices.Contains(tables, n.Relation) {
			tb.Errorf("a sequential scan of %s:\n%s\nin the plan of\n%s", n.Relation, plan, sql)
		}
	})
	return plan
}

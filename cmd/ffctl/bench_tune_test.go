package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/internal/testdb"
)

// ffctl bench tune at a tiny size drains once per setting and prints the
// table: a row per setting (the grid's and the defaults'), the best one and
// the defaults' ratio to it. How fast any setting is, is not checked. Not
// parallel: it swaps benchStdout.
func TestBenchTunePrintsTheTableAndTheRatio(t *testing.T) {
	testdb.Reserve(t, 30) // the scratch pool, the scheduler's (12) and the worker's (up to 22)
	testdb.New(t, &testdb.Options{NoMigrate: true})
	var out, errb bytes.Buffer
	benchStdout = &out
	defer func() { benchStdout = os.Stdout }()
	t.Setenv("DATABASE_URL", testdb.URL())
	code := run(context.Background(), []string{"bench", "tune", "--tune-leases", "200", "--tune-lanes", "2", "--tune-apply-workers", "16", "--tune-rounds", "1"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	table := out.String()
	for _, want := range []string{"expire drain, 2 group lanes, 16 apply workers", "(the defaults)", "the defaults (", "against the best found", "best: ", "≥ 0.90"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table misses %q:\n%s", want, table)
		}
	}
	if !regexp.MustCompile(`the defaults \(\d+ group lanes, \d+ apply workers\) against the best found\s+\d+(\.\d+)? leases/s\s+best: .*\s\d\.\d\d\s+≥ 0\.90\s+(yes|NO)`).MatchString(table) {
		t.Errorf("no ratio of the defaults to the best in:\n%s", table)
	}
}

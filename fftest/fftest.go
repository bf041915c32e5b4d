// Package fftest is a test kit for people who write scanners, item actions
// or applications on ffriver: a freshly migrated schema of their own on a
// real Postgres (dropped when the test ends), an execution store on it, and
// helpers that fail the test instead of returning errors. Tests that use it
// can call t.Parallel(): every schema is the test's own.
//
// New returns a Kit, which is most of it: a schema, a store on it with a
// manual clock starting at StartMs, and the helpers a test of executions
// needs (Create, ClaimOne, State, AwaitState, LeaseEvents, Count, Exec, …):
//
//	func TestExpiry(t *testing.T) {
//		t.Parallel()
//		k := fftest.New(t, nil)
//		id := k.Create(executions.CreateParams{Namespace: "billing"})
//		k.ClaimOne(fftest.DefaultLane, time.Second)
//		k.WantEvents(id, []string{"acquired"}, nil)
//	}
//
// On builds a Kit over a store the test opened itself, such as the Store
// of an ffriver.Service running the pipeline on a NewSchema. NewSchema,
// NewStore and Await are the pieces, for a test that wants only one.
//
// The server is found through $DATABASE_URL, else DefaultURL. Without a
// reachable server the test is skipped, except with CI=true, where it fails.
package fftest

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is the database used when $DATABASE_URL is unset.
const DefaultURL = testdb.DefaultURL

// DatabaseURL returns the database URL tests use: $DATABASE_URL, else
// DefaultURL.
func DatabaseURL() string { return testdb.URL() }

// SchemaName returns a unique, valid schema name starting with a prefix
// derived from name, for a scratch schema of an example or a tool.
func SchemaName(name string) string { return testdb.SchemaName(name) }

// Schema is one test's schema, migrated (River's tables and ffriver's),
// and a pool whose search_path is that schema.
type Schema struct {
	Pool       *pgxpool.Pool
	Name       string
	Partitions ff.Partitions
}

// Options tune NewSchema.
type Options struct {
	// Partitions of the schema (default ff.DefaultPartitions).
	Partitions ff.Partitions
	// MaxConns of the pool (default 16).
	MaxConns int32
}

// NewSchema creates a schema named after the test, migrates it, and drops
// it (and closes its pool) when the test ends.
func NewSchema(tb testing.TB, opts *Options) *Schema {
	tb.Helper()
	o := testdb.Options{}
	if opts != nil {
		o.Partitions, o.MaxConns = opts.Partitions, opts.MaxConns
	}
	db := testdb.New(tb, &o)
	return &Schema{Pool: db.Pool, Name: db.Schema, Partitions: db.Partitions}
}

// NewStore returns an execution store on a fresh schema (NewSchema), opened
// with cfg (its Schema is set to the test's).
func NewStore(tb testing.TB, cfg executions.Config) (*executions.Store, *Schema) {
	tb.Helper()
	s := NewSchema(tb, nil)
	return openStore(tb, s, cfg), s
}

// openStore opens a store on s with cfg, its Schema set to s's.
func openStore(tb testing.TB, s *Schema, cfg executions.Config) *executions.Store {
	tb.Helper()
	cfg.Schema = s.Name
	st, err := executions.Open(context.Background(), s.Pool, cfg)
	if err != nil {
		tb.Fatalf("fftest: opening the store: %v", err)
	}
	return st
}

// Await checks cond every 10 ms until it holds, and fails the test when it
// still does not after within.
func Await(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !poll(within, cond) {
		tb.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// poll checks cond every 10 ms until it holds (true) or within has passed
// (false).
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-t.C
	}
	return true
}

package testdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultConnBudget is how many of the server's connections the tests that
// reserve them (Reserve) may hold at once, together, whatever test runs
// share the server: two `make test` runs of two clones against one server
// with the default max_connections of 100 keep below it (each suite's
// other tests use about 15 at once). $FF_TEST_CONN_BUDGET replaces it; 0
// turns reservations off.
const DefaultConnBudget = 55

// SchedulerConns and WorkerConns are the pools' caps of an ffscheduler and
// an ffworker started at their defaults (ffriver's PoolConns with the
// default lanes and two scan workers), and BinariesConns what the two may
// hold together. A test that starts them reserves these and its streams'
// (2 each). Reserving 12 for both, their usual holding with two group
// lanes, let two suites side by side reach max_connections once the lanes
// became four.
const (
	SchedulerConns = 12
	WorkerConns    = 22
	BinariesConns  = SchedulerConns + WorkerConns
)

// reserveKey is the first key of the advisory locks that stand for the
// budget's units (key 0 of it serialises the allocations).
const reserveKey int32 = 0x66_66_72_76 // "ffrv"

// Reserve holds n units of the server's connection budget for the rest of
// the test: a test that starts binaries, or otherwise holds many
// connections at once, says about how many it holds, and waits here until
// the tests of every run on the server hold no more than the budget
// together. The units are session advisory locks of one connection of the
// test's own (application_name ffriver-test-reserve), released when the
// test ends (or its process dies); it says every 30 s that it waits.
//
// The budget is the server's, not the run's: two suites side by side share
// it, so the connections they hold together stay within max_connections,
// where counting within one process could not see the other.
func Reserve(tb testing.TB, n int) {
	tb.Helper()
	budget := DefaultConnBudget
	if v := os.Getenv("FF_TEST_CONN_BUDGET"); v != "" {
		b, err := strconv.Atoi(v)
		if err != nil || b < 0 {
			tb.Fatalf("testdb: $FF_TEST_CONN_BUDGET=%q: want a count of connections, 0 to turn reservations off", v)
		}
		budget = b
	}
	if budget == 0 || n <= 0 {
		return
	}
	n = min(n, budget)
	ctx := tb.Context()
	began, said := time.Now(), time.Now()
	var conn *pgx.Conn
	for {
		if conn == nil {
			cfg, err := pgx.ParseConfig(URL())
			if err != nil {
				tb.Fatalf("testdb: the database URL: %v", err)
			}
			cfg.RuntimeParams["application_name"] = "ffriver-test-reserve"
			c, err := pgx.ConnectConfig(ctx, cfg)
			var pgErr *pgconn.PgError
			if err != nil && errors.As(err, &pgErr) && (pgErr.Code == "53300" || pgErr.Code == "57P03") && ctx.Err() == nil {
				// A server full of other runs' connections (or starting
				// up): wait as for units.
				time.Sleep(250 * time.Millisecond)
				continue
			}
			if err != nil {
				unreachable(tb, URL(), err)
			}
			conn = c
			tb.Cleanup(func() { conn.Close(context.Background()) })
		}
		got, err := take(ctx, conn, reserveKey, n, budget)
		if err != nil {
			tb.Fatalf("testdb: reserving %d of the server's %d test connections: %v", n, budget, err)
		}
		if got {
			if waited := time.Since(began); waited > time.Second {
				tb.Logf("testdb: waited %s for %d of the server's %d test connections", waited.Round(100*time.Millisecond), n, budget)
			}
			return
		}
		if time.Since(said) > 30*time.Second {
			said = time.Now()
			tb.Logf("testdb: waiting %s so far for %d of the server's %d test connections (other tests hold them)", time.Since(began).Round(time.Second), n, budget)
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("testdb: no %d of the server's %d test connections within the test's time", n, budget)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// take tries to hold n free units of the budget (the advisory locks (key,
// 1..budget)) in conn's session: all of them, or none. Allocations are
// serialised by the allocator's lock (key, 0), held for a few statements,
// so two tests never each hold part of what both need.
func take(ctx context.Context, conn *pgx.Conn, key int32, n, budget int) (bool, error) {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, 0)`, key); err != nil {
		return false, err
	}
	var taken []int32
	err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(k), '{}') FROM (
		SELECT k FROM generate_series(1, $2::int) k WHERE pg_try_advisory_lock($1, k) LIMIT $3) t`, key, budget, n).Scan(&taken)
	if err == nil && len(taken) < n {
		_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock($1, k) FROM unnest($2::int[]) k`, key, taken)
	}
	if _, uerr := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, 0)`, key); err == nil {
		err = uerr
	}
	if err != nil {
		return false, fmt.Errorf("advisory locks: %w", err)
	}
	return len(taken) >= n, nil
}

package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RetentionOptions size the retention scenario.
type RetentionOptions struct {
	// Events removed by each way (default 1,000,000).
	Events int
}

// retentionCost is what removing the events cost the server.
type retentionCost struct {
	elapsed time.Duration
	walB    int64         // WAL written, server-wide
	cpu     time.Duration // CPU of the removing backend (0: unknown)
	dead    int64         // dead tuples left in the table
}

// Retention measures outbox retention by partition (a partition of Events
// lease events dropped by outboxretention.MaintainPartitions) against the row trim
// of earlier releases (outboxretention.Trim deleting the same
// number of events in batches of 10,000, then the VACUUM that reclaims
// them, which autovacuum would run later), in one scratch schema: removal
// rate, WAL written, the removing backend's CPU and the dead tuples left.
// Targets: WAL and CPU per removed event ≤ 0.1 of the DELETE's, no dead
// tuple left.
//
// WAL is read from the server's insert position, so it counts every
// writer's: run it on a quiet server. CPU is read from /proc for the
// backend, so only where the server runs on this host.
func Retention(ctx context.Context, env *Env, o RetentionOptions) ([]Result, error) {
	if o.Events == 0 {
		o.Events = 1_000_000
	}
	pool, schema, cleanup, err := env.scratch(ctx, "retention", 4)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	st, err := executions.Open(ctx, pool, executions.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	s := dbutil.Schema(schema)
	// Autovacuum would do the DELETE's cleanup in a process of its own,
	// uncounted, and the drop's partition is gone anyway.
	if _, err := conn.Exec(ctx, s.SQL(`ALTER TABLE {S}`+outboxretention.DefaultPartition(outbox.LeaseTable)+` SET (autovacuum_enabled = false)`)); err != nil {
		return nil, err
	}

	// The row trim: events in the DEFAULT partition, occurred an hour ago.
	old := time.Now().Add(-time.Hour).UnixMilli()
	env.Logger.InfoContext(ctx, "bench retention: writing events for the row trim", "events", o.Events)
	if err := fillEvents(ctx, pool, s, o.Events, old, nil); err != nil {
		return nil, err
	}
	del, err := measureRemoval(ctx, conn, s, func(q *pgxpool.Conn) error {
		for {
			var n int64
			err := pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
				var err error
				n, err = outboxretention.Trim(ctx, tx, dbutil.Schema(st.Schema()), outboxretention.TrimParams{Table: outbox.LeaseTable, CutoffMs: old + 1, NowMs: st.NowMs(), Limit: 10_000})
				return err
			})
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		return nil
	}, outboxretention.DefaultPartition(outbox.LeaseTable))
	if err != nil {
		return nil, fmt.Errorf("retention bench, row trim: %w", err)
	}

	// The partition drop: 10 s partitions; the events written into the
	// first, which is dropped once the database's clock is past it.
	var res outboxretention.MaintainResult
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err = outboxretention.MaintainPartitions(ctx, tx, s, outboxretention.Maintenance{Table: outbox.LeaseTable, Width: 10 * time.Second, Ahead: 30 * time.Second})
		return err
	}); err != nil {
		return nil, err
	}
	if len(res.Created) == 0 {
		// Maintenance waits for no one: another session holds the table.
		return nil, fmt.Errorf("retention bench: no partition created (%+v): is another session holding %s?", res, outbox.LeaseTable)
	}
	var lo, hi int64
	if err := pool.QueryRow(ctx, s.SQL(`SELECT lo_ms, hi_ms FROM {S}ff_outbox_partition WHERE partition_name = $1`), res.Created[0]).Scan(&lo, &hi); err != nil {
		return nil, err
	}
	env.Logger.InfoContext(ctx, "bench retention: writing events into a partition", "events", o.Events, "partition", res.Created[0])
	if err := fillEvents(ctx, pool, s, o.Events, old, &lo); err != nil {
		return nil, err
	}
	for {
		var now int64
		if err := pool.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&now); err != nil {
			return nil, err
		}
		if now >= hi+1000 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(hi+1000-now) * time.Millisecond):
		}
	}
	var dropped int64
	drop, err := measureRemoval(ctx, conn, s, func(q *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
			r, err := outboxretention.MaintainPartitions(ctx, tx, s, outboxretention.Maintenance{Table: outbox.LeaseTable,
				CutoffMs: time.Now().UnixMilli(), NowMs: time.Now().UnixMilli()})
			dropped = r.DroppedEvents
			return err
		})
	}, outbox.LeaseTable)
	if err != nil {
		return nil, fmt.Errorf("retention bench, partition drop: %w", err)
	}
	if dropped != int64(o.Events) {
		return nil, fmt.Errorf("retention bench: the drop removed %d events, want %d", dropped, o.Events)
	}

	n := float64(o.Events)
	perEvent := func(c retentionCost) (rate, wal, cpuUs float64) {
		return n / c.elapsed.Seconds(), float64(c.walB) / n, float64(c.cpu.Microseconds()) / n
	}
	dRate, dWAL, dCPU := perEvent(drop)
	rRate, rWAL, rCPU := perEvent(del)
	walRatio, cpuRatio := ratioF(dWAL, rWAL), ratioF(dCPU, rCPU)
	out := []Result{
		{Scenario: "retention", Figure: fmt.Sprintf("%d lease events removed: a partition dropped", o.Events), Value: dRate, Unit: "events/s",
			Baseline: "row trim (DELETE in batches of 10,000) and its VACUUM", BaselineValue: rRate, Ratio: ratioF(dRate, rRate)},
		{Scenario: "retention", Figure: "WAL per removed event", Value: dWAL, Unit: "B",
			Baseline: "row trim and its VACUUM", BaselineValue: rWAL, Ratio: walRatio, Target: "≤ 0.1", Met: met(walRatio <= 0.1),
			Note: "server-wide WAL: other writers count too"},
		{Scenario: "retention", Figure: "dead tuples left", Value: float64(drop.dead), Unit: "tuples",
			Baseline: "row trim, before its VACUUM", BaselineValue: float64(del.dead), Target: "0", Met: met(drop.dead == 0)},
	}
	if drop.cpu > 0 && del.cpu > 0 {
		out = append(out, Result{Scenario: "retention", Figure: "server CPU per removed event", Value: dCPU, Unit: "µs",
			Baseline: "row trim and its VACUUM", BaselineValue: rCPU, Ratio: cpuRatio, Target: "≤ 0.1", Met: met(cpuRatio <= 0.1)})
	} else {
		out = append(out, Result{Scenario: "retention", Figure: "server CPU per removed event", Unit: "µs",
			Note: "not measured: the server's backend is not on this host"})
	}
	return out, nil
}

// fillEvents bulk-inserts n lease events that occurred at atMs, 100,000 to
// a transaction, written at *writtenMs (nil: the column default).
func fillEvents(ctx context.Context, pool *pgxpool.Pool, s dbutil.Schema, n int, atMs int64, writtenMs *int64) error {
	for done := 0; done < n; {
		k := min(100_000, n-done)
		_, err := pool.Exec(ctx, s.SQL(`INSERT INTO {S}ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key, lease_epoch, written_at_ms)
			SELECT gen_random_uuid()::text, 'acquired', $2, i % 256, 1,
			       coalesce($3::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
			FROM generate_series(1, $1) i`), k, atMs, writtenMs)
		if err != nil {
			return fmt.Errorf("writing events: %w", err)
		}
		done += k
	}
	return nil
}

// measureRemoval runs remove on conn and returns its cost: the time, the
// server's WAL, the backend's CPU and the dead tuples left in table; for
// a row trim (table still there) it then vacuums the table on the same
// backend and counts that in.
func measureRemoval(ctx context.Context, conn *pgxpool.Conn, s dbutil.Schema, remove func(*pgxpool.Conn) error, table string) (retentionCost, error) {
	var c retentionCost
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return c, err
	}
	// Both ways start right after a checkpoint, so both pay the full-page
	// images of the pages they touch first. Only a superuser (or a member
	// of pg_checkpoint) may ask for one; without it, both pay what the
	// server's own checkpoints make them pay.
	_, _ = conn.Exec(ctx, `CHECKPOINT`)
	var lsn0 string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn0); err != nil {
		return c, err
	}
	cpu0 := backendCPU(pid)
	start := time.Now()
	if err := remove(conn); err != nil {
		return c, err
	}
	if table != outbox.LeaseTable {
		// The row trim's dead tuples, before its VACUUM reclaims them.
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			return c, err
		}
		if _, err := conn.Exec(ctx, `SELECT 1`); err != nil { // the flush happens at this transaction's end
			return c, err
		}
		if err := conn.QueryRow(ctx, s.SQL(`SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = '{S}`+table+`'::regclass`)).Scan(&c.dead); err != nil {
			return c, err
		}
		if _, err := conn.Exec(ctx, s.SQL(`VACUUM {S}`+table)); err != nil {
			return c, err
		}
	}
	c.elapsed = time.Since(start)
	if cpu1 := backendCPU(pid); cpu0 >= 0 && cpu1 >= 0 {
		c.cpu = cpu1 - cpu0
	}
	if err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, lsn0).Scan(&c.walB); err != nil {
		return c, err
	}
	return c, nil
}

// backendCPU returns the user and system CPU time of process pid from
// /proc, or -1 when it cannot be read (the server is on another host).
func backendCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name (which may hold spaces) in ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

package scanners

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testlog"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
)

// An outbox_retention job whose partitions need an attach while another
// session sits idle in a transaction that read the outbox (what a BI
// session or pg_dump does) neither waits for that session nor fails: it
// finishes within about its lock timeout, its output lists the partitions
// it could not create and the session that held the table, and an info
// line says the next pass tries again. Once the session ends, the next job
// creates them.
func TestTrimOutboxDefersPartitionsLockedByAnotherSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := fftest.NewStore(t, executions.Config{})
	var logs testlog.Buffer
	env := &workers.Env{Store: st, Logger: slog.New(slog.NewTextHandler(&logs, nil))}

	reader, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	var n, pid int64
	if err := reader.QueryRow(ctx, `SELECT count(*), pg_backend_pid() FROM ff_lease_event`).Scan(&n, &pid); err != nil {
		t.Fatal(err)
	}

	args := jobs.TrimOutboxArgs{Table: jobs.OutboxLease, CutoffMs: time.Now().Add(-40 * time.Second).UnixMilli(), Limit: 1000,
		PartitionMs: (10 * time.Second).Milliseconds()}
	job := func() (workers.Output, time.Duration, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		var out workers.Output
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			out, err = trimOutbox(ctx, tx, env, args)
			return err
		})
		return out, time.Since(start), err
	}

	out, took, err := job()
	if err != nil || took > 2*time.Second {
		t.Fatalf("the job beside an idle reader: %v after %s; want it to finish within about a second, without an error", err, took.Round(time.Millisecond))
	}
	raw, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var shown struct {
		Detail struct {
			Partitions struct {
				Created      []string `json:"created"`
				CreateLocked []string `json:"create_locked"`
				LockHolders  []struct {
					PID   int64  `json:"pid"`
					State string `json:"state"`
				} `json:"lock_holders"`
			} `json:"partitions"`
		} `json:"detail"`
	}
	if err := json.Unmarshal(raw, &shown); err != nil {
		t.Fatal(err)
	}
	p := shown.Detail.Partitions
	if len(p.Created) != 0 || len(p.CreateLocked) == 0 || len(p.LockHolders) == 0 || p.LockHolders[0].PID != pid || p.LockHolders[0].State != "idle in transaction" {
		t.Fatalf("the job's output beside an idle reader (pid %d): %s; want the partitions it did not create and the reader named", pid, raw)
	}
	line := ""
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "waits for a lock another session holds") {
			line = l
		}
	}
	if !strings.Contains(line, "level=INFO") || !strings.Contains(line, fmt.Sprintf("pid %d (", pid)) || !strings.Contains(line, "idle in transaction, transaction open") {
		t.Fatalf("logs %q: want an info line saying the maintenance waits for the reader (pid %d)", logs.String(), pid)
	}

	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	out, _, err = job()
	if d, ok := out.Detail.(trimOutput); err != nil || !ok || len(d.Partitions.Created) == 0 || d.Partitions.Deferred() {
		t.Fatalf("the job after the reader committed: %+v, %v; want the partitions created", out, err)
	}
}

package pipeline

import (
	"bytes"
	"context"
	"testing"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/jobs"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// The pre-check's key is the unique_key River stores: if a River upgrade
// changes how it is computed, this fails (the pre-check would silently stop
// skipping anything).
func TestInFlightKeyMatchesRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	id := ff.ExecutionID{Partition: 7, UUID: uuid.New()}
	key := jobs.GroupKey{Partition: 3, FlowID: uuid.New(), DownstreamEID: uuid.New()}
	ns := "tenant-a"
	for _, args := range []river.JobArgs{
		jobs.ExpireAttemptArgs{ID: id, AttemptIndex: 2},
		jobs.PromoteDelayedArgs{ID: id},
		jobs.ExpireDeadlineArgs{ID: id},
		jobs.CancelGroupArgs{GroupKey: key},
		jobs.ReconcileGroupArgs{GroupKey: key},
		jobs.ScanArgs{Scanner: "attempt_timeout", Partition: 5, Batch: 1000, Filter: &jobs.Filter{Namespace: ns}},
	} {
		res, err := client.Insert(ctx, args, itemInsertOpts(ff.Filter{Namespace: ns}))
		if err != nil {
			t.Fatalf("%s: %v", args.Kind(), err)
		}
		var stored []byte
		if err := db.Pool.QueryRow(ctx, `SELECT unique_key FROM river_job WHERE id = $1`, res.Job.ID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		got, ok, err := inFlightKey(args)
		if err != nil || !ok {
			t.Fatalf("%s: inFlightKey: ok=%v, %v", args.Kind(), ok, err)
		}
		if !bytes.Equal(got, stored) {
			t.Errorf("%s: key %x, River stored %x", args.Kind(), got, stored)
		}
	}
	// Args with river:"unique" tags are left to River.
	if _, ok, err := inFlightKey(jobs.TrimOutboxArgs{Table: jobs.OutboxLease, Limit: 10, Namespace: &ns}); ok || err != nil {
		t.Fatalf("TrimOutboxArgs: ok=%v, %v; want not pre-checked", ok, err)
	}
}

// skipInFlight drops exactly the items whose job is queued or running, and
// keeps those whose job has finished.
func TestSkipInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	opts := itemInsertOpts(ff.Filter{})
	mk := func() jobs.ExpireAttemptArgs {
		return jobs.ExpireAttemptArgs{ID: ff.ExecutionID{Partition: 1, UUID: uuid.New()}}
	}
	queued, finished, fresh := mk(), mk(), mk()
	trim := jobs.TrimOutboxArgs{Table: jobs.OutboxLease, Limit: 10}
	for _, a := range []river.JobArgs{queued, finished, trim} {
		if _, err := client.Insert(ctx, a, opts); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE args->'id' = to_jsonb($1::text)`,
		finished.ID.String()); err != nil {
		t.Fatal(err)
	}
	params := []river.InsertManyParams{{Args: queued, InsertOpts: opts}, {Args: finished, InsertOpts: opts},
		{Args: fresh, InsertOpts: opts}, {Args: trim, InsertOpts: opts}}
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		left, skipped, err := skipInFlight(ctx, tx, db.Schema, params)
		if err != nil {
			return err
		}
		if skipped != 1 || len(left) != 3 || left[0].Args != river.JobArgs(finished) || left[1].Args != river.JobArgs(fresh) {
			t.Fatalf("skipped %d, left %v; want the queued item skipped only", skipped, left)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

func TestWriterCopiesNamespaceAndTagAndRecordsTheTransaction(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t, nil)
	w, err := outbox.NewWriter(db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	id := ff.NewExecutionID(7)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase,
		ownership_state, eligibility_state, public_state, attempt_state, raw_fields)
		VALUES ($1, $2, 'l', 'active', 'leased', 'not_applicable', 'active', 'running_attempt',
		        '{"namespace":"ns","tags":{"cairn.instance_id":"inst","other":"x"}}')`, id.Partition, id.UUID); err != nil {
		t.Fatal(err)
	}
	missing := ff.NewExecutionID(8)
	var xact int64
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&xact); err != nil {
			return err
		}
		lid := uuid.New()
		if err := w.Lease(ctx, tx, outbox.LeaseRow{ID: id, Type: ff.LeaseAcquired, LeaseID: &lid, OccurredAtMs: 5}); err != nil {
			return err
		}
		if err := w.Lease(ctx, tx, outbox.LeaseRow{ID: missing, Type: ff.LeaseExpired, OccurredAtMs: 6}); err != nil {
			return err
		}
		return w.Completion(ctx, tx, outbox.CompletionRow{ID: id, Outcome: ff.OutcomeSuccess, OccurredAtMs: 7})
	})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		exec        string
		ns, tag     *string
		xact, atMs  int64
		partitionID int32
	}
	rows, _ := db.Pool.Query(ctx, `SELECT execution_id, namespace, instance_tag, xact_id, occurred_at_ms, partition_key FROM ff_lease_event ORDER BY event_id`)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.exec, &x.ns, &x.tag, &x.xact, &x.atMs, &x.partitionID)
	})
	if err != nil || len(got) != 2 {
		t.Fatalf("lease rows = %v, %v", got, err)
	}
	if got[0].exec != id.UUID.String() || *got[0].ns != "ns" || *got[0].tag != "inst" || got[0].xact != xact || got[0].partitionID != 7 {
		t.Errorf("first event = %+v, want namespace ns, tag inst, xact %d", got[0], xact)
	}
	if got[1].ns != nil || got[1].tag != nil || got[1].exec != missing.UUID.String() {
		t.Errorf("event of a missing execution = %+v, want NULL namespace and tag", got[1])
	}
	var outcome, ns, tag string
	var cx int64
	if err := db.Pool.QueryRow(ctx, `SELECT outcome, namespace, instance_tag, xact_id FROM ff_completion_event`).Scan(&outcome, &ns, &tag, &cx); err != nil {
		t.Fatal(err)
	}
	if outcome != "success" || ns != "ns" || tag != "inst" || cx != xact {
		t.Errorf("completion = %s %s %s %d", outcome, ns, tag, cx)
	}
}

func TestWriterRejectsUnknownTypes(t *testing.T) {
	w, err := outbox.NewWriter("")
	if err != nil {
		t.Fatal(err)
	}
	var b pgx.Batch
	if err := w.QueueLease(&b, outbox.LeaseRow{Type: "stolen"}); !errors.Is(err, ff.ErrValidation) {
		t.Errorf("QueueLease(stolen) = %v", err)
	}
	if err := w.QueueCompletion(&b, outbox.CompletionRow{Outcome: "maybe"}); !errors.Is(err, ff.ErrValidation) {
		t.Errorf("QueueCompletion(maybe) = %v", err)
	}
	if b.Len() != 0 {
		t.Errorf("rejected events were queued")
	}
	if _, err := outbox.NewWriter(`a"b`); !errors.Is(err, ff.ErrValidation) {
		t.Errorf("NewWriter with a bad schema = %v", err)
	}
}

func TestWakerNotifiesListeners(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db := testdb.New(t, nil)
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `LISTEN "`+outbox.Channel(db.Schema)+`"`); err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWaker(db.Pool, db.Schema, 10*time.Millisecond, nil)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	for range 3 {
		w.Poke()
	}
	n, err := conn.Conn().WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no wake-up: %v", err)
	}
	if n.Channel != outbox.Channel(db.Schema) {
		t.Errorf("channel = %q", n.Channel)
	}
	var nilWaker *outbox.Waker
	nilWaker.Poke() // must not panic
}

func TestDiscardingWriterWritesNothingButStillValidates(t *testing.T) {
	w, err := outbox.NewWriter("")
	if err != nil {
		t.Fatal(err)
	}
	d := w.Discarding()
	var b pgx.Batch
	if err := d.QueueLease(&b, outbox.LeaseRow{ID: ff.NewExecutionID(1), Type: ff.LeaseRenewed}); err != nil || b.Len() != 0 {
		t.Fatalf("discarding QueueLease = %v, queued %d", err, b.Len())
	}
	if err := d.QueueLease(&b, outbox.LeaseRow{Type: "bogus"}); !errors.Is(err, ff.ErrValidation) {
		t.Fatalf("discarding writer accepted a bad type: %v", err)
	}
	if err := w.QueueLease(&b, outbox.LeaseRow{ID: ff.NewExecutionID(1), Type: ff.LeaseRenewed}); err != nil || b.Len() != 1 {
		t.Fatalf("the original writer was changed by Discarding: %v, %d", err, b.Len())
	}
}

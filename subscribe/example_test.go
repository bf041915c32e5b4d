package subscribe_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Consuming the lease history: subscribe, range over the events, keep the
// cursor of the last one handled to resume after a restart.
func Example() {
	ctx := context.Background()
	pool, schema, cleanup := exampleSchema(ctx)
	defer cleanup()

	stream, err := subscribe.Leases(ctx, pool, subscribe.Options{
		Schema: schema,
		Start:  subscribe.StartBeginning, // or StartAfter with a saved cursor
		Filter: ff.Filter{Namespace: "billing"},
	})
	if err != nil {
		log.Fatal(err) // a bad option or cursor fails here, never later
	}
	defer stream.Close()

	// Producers write events in their own transactions.
	writeExampleEvents(ctx, pool, schema)

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var saved subscribe.Cursor
	n := 0
	for ev, err := range stream.All(ctx) {
		var disconnected *subscribe.DisconnectedError
		if errors.As(err, &disconnected) {
			continue // the stream reconnects by itself and loses nothing
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Type, ev.ExecutionID.Partition, ev.Namespace)
		saved = ev.Cursor // persist this to resume exactly after ev
		if n++; n == 3 {
			break
		}
	}
	// The printable form is what ffctl tail --cursor takes.
	_, err = subscribe.ParseCursor(saved.String())
	fmt.Println("resume after the saved cursor:", err == nil)
	// Output:
	// acquired 7 billing
	// renewed 7 billing
	// revoked 7 billing
	// resume after the saved cursor: true
}

// writeExampleEvents records a lease's life in the outbox, and one event of
// another namespace that the filter drops.
func writeExampleEvents(ctx context.Context, pool *pgxpool.Pool, schema string) {
	w, err := outbox.NewWriter(schema)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO "`+schema+`".ff_exec_core
		(partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state, public_state, attempt_state, raw_fields)
		VALUES (7, '6f1f4bb4-5d0a-4b0a-9a6e-1c1d1e1f2a2b', 'default', 'active', 'leased', 'not_applicable', 'active', 'running_attempt',
		        '{"namespace": "billing"}')`); err != nil {
		log.Fatal(err)
	}
	id := ff.MustParseExecutionID("{fp:7}:6f1f4bb4-5d0a-4b0a-9a6e-1c1d1e1f2a2b")
	for _, typ := range []string{ff.LeaseAcquired, ff.LeaseRenewed, ff.LeaseRevoked} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := w.Lease(ctx, tx, outbox.LeaseRow{ID: id, Type: typ, OccurredAtMs: time.Now().UnixMilli()}); err != nil {
			log.Fatal(err)
		}
		if err := w.Lease(ctx, tx, outbox.LeaseRow{ID: ff.NewExecutionID(8), Type: typ}); err != nil {
			log.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			log.Fatal(err)
		}
	}
}

// exampleSchema gives the example a freshly migrated schema of its own.
func exampleSchema(ctx context.Context) (*pgxpool.Pool, string, func()) {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	schema := fftest.SchemaName("example")
	if _, err := migrations.Migrate(ctx, pool, schema, nil); err != nil {
		log.Fatal(err)
	}
	return pool, schema, func() {
		if _, err := pool.Exec(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`); err != nil {
			log.Print(err)
		}
		pool.Close()
	}
}

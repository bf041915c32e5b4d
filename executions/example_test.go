package executions_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A worker's loop: create an execution, claim it, renew the lease while
// working, and complete it. Every step writes its lease and completion
// events in the same transaction as the state change.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	// A schema of its own (two runs at once never share one), dropped at
	// the end.
	schema := fftest.SchemaName("example_lifecycle")
	if _, err := migrations.Migrate(ctx, pool, schema, nil); err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`) //nolint:errcheck

	store, err := executions.Open(ctx, pool, executions.Config{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	id, err := store.Create(ctx, executions.CreateParams{
		Lane:        "emails",
		Namespace:   "tenant-a",
		Payload:     []byte(`{"to":"ada@example.com"}`),
		RetryPolicy: executions.RetryPolicy{MaxRetries: 3},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	leases, err := store.Claim(ctx, executions.ClaimParams{Lane: "emails", WorkerID: "mailer", LeaseTTL: 30 * time.Second})
	if err != nil || len(leases) != 1 {
		fmt.Println(leases, err)
		return
	}
	lease := leases[0]
	fmt.Println("claimed the created execution:", lease.ID == id, "attempt", lease.AttemptIndex, "epoch", lease.Epoch)

	if lease, err = store.Renew(ctx, lease, 30*time.Second); err != nil {
		fmt.Println(err)
		return
	}
	if err := store.Complete(ctx, lease, []byte(`{"sent":true}`)); err != nil {
		fmt.Println(err)
		return
	}
	e, err := store.Get(ctx, id)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.LifecyclePhase, e.PublicState)
	// Output:
	// claimed the created execution: true attempt 0 epoch 1
	// terminal completed
}

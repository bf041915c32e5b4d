package runner_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/runner"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A worker process: a Runner claims the lane's executions in batches, runs
// the handler for each (up to MaxWorkers at once), renews their leases, and
// commits their results, several executions per transaction. Cancelling Run's
// context stops it gracefully.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // $DATABASE_URL, else the local test database
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	// A schema of its own (two runs at once never share one), dropped at
	// the end.
	schema := fftest.SchemaName("example_runner")
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
	var ids []ff.ExecutionID
	for _, name := range []string{"ada", "grace", "edsger"} {
		id, err := store.Create(ctx, executions.CreateParams{Lane: "greetings", Payload: []byte(name)})
		if err != nil {
			fmt.Println(err)
			return
		}
		ids = append(ids, id)
	}

	r, err := runner.New(store, runner.Config{Lane: "greetings", MaxWorkers: 4, LeaseTTL: 30 * time.Second},
		func(ctx context.Context, ex *runner.Execution) ([]byte, error) {
			return []byte("hello, " + strings.ToUpper(string(ex.Payload[:1])) + string(ex.Payload[1:])), nil
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer stop()
	for _, id := range ids {
		for {
			e, err := store.Get(ctx, id)
			if err != nil {
				fmt.Println(err)
				return
			}
			if e.PublicState == "completed" {
				fmt.Println(string(e.Result))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop()
	fmt.Println("stopped:", <-done)
	// Output:
	// hello, Ada
	// hello, Grace
	// hello, Edsger
	// stopped: <nil>
}

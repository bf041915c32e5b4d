package ffriver_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/scanners"
	ffworkers "github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// SendEmailArgs is the host application's own job.
type SendEmailArgs struct {
	To string `json:"to"`
}

func (SendEmailArgs) Kind() string { return "send_email" }

// Embedding ffriver into an application that already runs River, its
// River tables in their own schema: ffriver's tables go into a schema of
// their own beside them (RiverSchema names River's to both Migrate and
// Config), and its workers, periodic jobs and queues into the
// application's own river.Config, next to the application's jobs in
// River's default queue. Attach starts the outbox waker and the tick
// watchdog; CheckTicks is the health check.
func Example_embed() {
	ctx := context.Background()
	// The client's pool serves the application's queue (10 workers) and
	// ffriver's (2 scan, 8 apply workers): Configure refuses a smaller one.
	poolConfig, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	poolConfig.MaxConns = 10 + ffriver.PoolConns(2, 8)
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	// The application's schema and ffriver's, each of its own (two runs at
	// once never share one), dropped at the end.
	appSchema, schema := fftest.SchemaName("example_app"), fftest.SchemaName("example_embed")
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+appSchema); err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; DROP SCHEMA `+appSchema+` CASCADE`) //nolint:errcheck

	// The application before ffriver: River's tables, migrated as River
	// says (rivermigrate, or the river CLI)...
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: appSchema})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		fmt.Println(err)
		return
	}
	// ...and its River config.
	workers := river.NewWorkers()
	sent := make(chan string, 1)
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[SendEmailArgs]) error {
		sent <- job.Args.To
		return nil
	}))
	rc := &river.Config{
		Schema:  appSchema,
		Workers: workers,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}

	// 1. ffriver's tables, sharing the application's River (ffctl migrate
	// --schema <schema> --river-schema <appSchema>).
	if _, err := migrations.Migrate(ctx, pool, schema, &migrations.Options{RiverSchema: appSchema}); err != nil {
		fmt.Println(err)
		return
	}
	// 2. ffriver verifies both schemas, then adds its workers, ticks and
	// queues to the application's config.
	f, err := ffriver.New(ctx, pool, ffriver.Config{
		Schema:      schema,
		RiverSchema: appSchema,
		Scanners:    map[string]ffworkers.Settings{scanners.DelayedPromoter: {Interval: 200 * time.Millisecond}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := f.Configure(rc, 2, 8); err != nil {
		fmt.Println(err)
		return
	}
	// River's insert notifications are spaced by the client's cooldown
	// (100 ms by default, for every queue of the client); ffriver's item
	// jobs want them at once.
	rc.FetchCooldown = ffriver.QueueFetchCooldown
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		fmt.Println(err)
		return
	}
	// 3. The outbox waker, the tick watchdog and the item metrics, then River.
	if err := f.Attach(ctx, client, ffriver.AttachOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer client.Stop(ctx) //nolint:errcheck

	if _, err := client.Insert(ctx, SendEmailArgs{To: "ada@example.com"}, nil); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("host job worked:", <-sent)

	id, err := f.Store().Create(ctx, executions.CreateParams{Lane: "reports", DelayUntil: time.Now().Add(300 * time.Millisecond)})
	if err != nil {
		fmt.Println(err)
		return
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if e, err := f.Store().Get(ctx, id); err == nil && e.EligibilityState == "eligible_now" {
			fmt.Println("delayed execution promoted:", e.PublicState)
			fmt.Println("ticks:", f.CheckTicks(ctx, 0))
			return
		}
	}
	fmt.Println("not promoted")
	// Output:
	// host job worked: ada@example.com
	// delayed execution promoted: waiting
	// ticks: <nil>
}

// A process of your own, run the way ffscheduler runs (here with the apply
// queue too): Run verifies the schema, starts the outbox waker and River,
// and stops gracefully when its context ends.
func ExampleRun() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	// A schema of its own (two runs at once never share one), dropped at
	// the end.
	schema := fftest.SchemaName("example_run")
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
	id, err := store.Create(ctx, executions.CreateParams{Lane: "reports", DelayUntil: time.Now().Add(300 * time.Millisecond)})
	if err != nil {
		fmt.Println(err)
		return
	}

	runCtx, stop := context.WithCancel(ctx) // a signal, in a real process
	done := make(chan error, 1)
	go func() {
		done <- ffriver.Run(runCtx, pool, ffriver.Config{
			Schema:   schema,
			Scanners: map[string]ffworkers.Settings{scanners.DelayedPromoter: {Interval: 200 * time.Millisecond}},
		}, ffriver.RunOptions{Name: "example", Process: ffriver.ProcessOptions{
			Role: ffriver.Scheduler, Client: ffriver.ClientOptions{ScanWorkers: 2, ApplyWorkers: 4},
		}})
	}()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if e, err := store.Get(ctx, id); err == nil && e.EligibilityState == "eligible_now" {
			fmt.Println("delayed execution promoted:", e.PublicState)
			break
		}
	}
	stop()
	fmt.Println("stopped:", <-done)
	// Output:
	// delayed execution promoted: waiting
	// stopped: <nil>
}

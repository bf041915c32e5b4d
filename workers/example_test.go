package workers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// starvationBoost is a user-written scanner: executions that have waited
// eligible for longer than its age get their priority raised by one, up to
// 10, so old work is not starved by a stream of high-priority work.
type starvationBoost struct{ age time.Duration }

// boostArgs is its item job: one execution.
type boostArgs struct {
	ID ff.ExecutionID `json:"id"`
}

func (boostArgs) Kind() string { return "example.boost_priority" }

func (s starvationBoost) Name() string { return "starvation_boost" }

func (s starvationBoost) Defaults() workers.Settings {
	return workers.Settings{Interval: 5 * time.Second, Batch: 500}
}

// Due counts, per partition, the executions waiting longer than the age,
// with the deployment's filter ($2..$4) as Scan applies it.
func (s starvationBoost) Due(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Due, error) {
	ns, tagKey, tagValue := req.FilterArgs()
	return workers.DueByPartition(ctx, q, req.SQL(`SELECT partition_key, count(*), min(created_at_ms) FROM {S}ff_exec_core
		WHERE lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now' AND priority < 10
		  AND created_at_ms < $1
		  AND ($2::text IS NULL OR raw_fields->>'namespace' = $2::text)
		  AND ($3::text IS NULL OR raw_fields->'tags'->>$3::text = $4::text)
		GROUP BY partition_key`), req.NowMs-s.age.Milliseconds(), ns, tagKey, tagValue)
}

// Scan is a keyset scan over (created_at_ms, execution_id), with the
// filter in SQL ($3..$5) and the cursor ($6, $7) as ScanExecutions passes
// them.
func (s starvationBoost) Scan(ctx context.Context, q workers.Querier, req workers.ScanRequest) (workers.ScanResult, error) {
	req.NowMs -= s.age.Milliseconds() // due: created before now - age
	return workers.ScanExecutions(ctx, q, req, `
SELECT c.execution_id, c.created_at_ms, 0 FROM {S}ff_exec_core c
WHERE c.partition_key = $1 AND c.lifecycle_phase = 'runnable' AND c.eligibility_state = 'eligible_now'
  AND c.priority < 10 AND c.created_at_ms < $2`+workers.ExecFilterSQL+`
  AND ($6::bigint IS NULL OR (c.created_at_ms, c.execution_id) > ($6::bigint, $7::uuid))
ORDER BY c.created_at_ms, c.execution_id
LIMIT $8`, func(id ff.ExecutionID, _ int32) river.JobArgs { return boostArgs{ID: id} })
}

// boost is the item's action, run by the apply engine in the item's
// transaction.
func (s starvationBoost) boost(ctx context.Context, tx pgx.Tx, env *workers.Env, a boostArgs) (workers.Output, error) {
	// Lock and recheck: the execution may have been claimed, boosted or
	// deleted since the scan; another transaction may hold it.
	var created int64
	var prio int32
	err := tx.QueryRow(ctx, env.SQL(`SELECT created_at_ms, priority FROM {S}ff_exec_core
		WHERE partition_key = $1 AND execution_id = $2
		  AND lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now'
		FOR NO KEY UPDATE SKIP LOCKED`), a.ID.Partition, a.ID.UUID).Scan(&created, &prio)
	if errors.Is(err, pgx.ErrNoRows) {
		return workers.Output{Outcome: workers.NoOp}, nil // gone, changed or locked: the next scan decides
	}
	if err != nil {
		return workers.Output{}, err
	}
	if prio >= 10 || created >= env.NowMs()-s.age.Milliseconds() {
		return workers.Output{Outcome: workers.NoOp}, nil
	}
	_, err = tx.Exec(ctx, env.SQL(`UPDATE {S}ff_exec_core SET priority = priority + 1
		WHERE partition_key = $1 AND execution_id = $2`), a.ID.Partition, a.ID.UUID)
	return workers.Output{Outcome: workers.Processed}, err
}

// A scanner of your own and its item kind, registered as one
// workers.Plugin next to the built-ins, exactly as they are registered.
func ExamplePlugin() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	// A schema of its own (two runs at once never share one), dropped at
	// the end.
	schema := fftest.SchemaName("example_scanner")
	if _, err := migrations.Migrate(ctx, pool, schema, nil); err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`) //nolint:errcheck

	boost := starvationBoost{age: time.Minute}
	f, err := ffriver.New(ctx, pool, ffriver.Config{
		Schema:   schema,
		Plugins:  []workers.Plugin{{Scanner: boost, Items: []workers.Item{workers.ItemOf(boost.boost)}}},
		Scanners: map[string]workers.Settings{"starvation_boost": {Interval: 100 * time.Millisecond}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	id, err := f.Store().Create(ctx, executions.CreateParams{Lane: "reports"})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Pretend it has been waiting for an hour.
	_, _ = pool.Exec(ctx, (`UPDATE ` + schema + `.ff_exec_core SET created_at_ms = created_at_ms - 3600000`))

	rc, err := f.SchedulerConfig(ffriver.ClientOptions{ScanWorkers: 1, ApplyWorkers: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer client.Stop(ctx) //nolint:errcheck

	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		e, err := f.Store().Get(ctx, id)
		if err == nil && e.Priority > 0 {
			fmt.Println("boosted")
			return
		}
	}
	fmt.Println("not boosted")
	// Output: boosted
}

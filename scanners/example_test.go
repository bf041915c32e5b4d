package scanners_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/scanners"
	"github.com/google/uuid"
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

func (s starvationBoost) Defaults() scanners.Settings {
	return scanners.Settings{Interval: 5 * time.Second, Batch: 500}
}

func (s starvationBoost) Due(ctx context.Context, q scanners.Querier, req scanners.DueRequest) ([]scanners.Due, error) {
	rows, err := q.Query(ctx, req.Env.SQL(`SELECT partition_key, count(*) FROM {S}ff_exec_core
		WHERE lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now' AND priority < 10
		  AND created_at_ms < $1 GROUP BY partition_key`), req.NowMs-s.age.Milliseconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (scanners.Due, error) {
		var d scanners.Due
		return d, r.Scan(&d.Partition, &d.Count)
	})
}

type boostCursor struct {
	Ms int64     `json:"ms"`
	ID uuid.UUID `json:"id"`
}

func (s starvationBoost) Scan(ctx context.Context, q scanners.Querier, req scanners.ScanRequest) (scanners.ScanResult, error) {
	var after *boostCursor
	if len(req.After) > 0 {
		after = &boostCursor{}
		if err := json.Unmarshal(req.After, after); err != nil {
			return scanners.ScanResult{}, err
		}
	} else {
		after = &boostCursor{Ms: -1}
	}
	ns, tagKey, tagValue := req.FilterArgs()
	rows, err := q.Query(ctx, req.Env.SQL(`SELECT execution_id, created_at_ms FROM {S}ff_exec_core
		WHERE partition_key = $1 AND lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now'
		  AND priority < 10 AND created_at_ms < $2
		  AND ($3::text IS NULL OR raw_fields->>'namespace' = $3::text)
		  AND ($4::text IS NULL OR raw_fields->'tags'->>$4::text = $5::text)
		  AND (created_at_ms, execution_id) > ($6, $7)
		ORDER BY created_at_ms, execution_id LIMIT $8`),
		req.Partition, req.NowMs-s.age.Milliseconds(), ns, tagKey, tagValue, after.Ms, after.ID, req.Limit)
	if err != nil {
		return scanners.ScanResult{}, err
	}
	defer rows.Close()
	var res scanners.ScanResult
	var last boostCursor
	for rows.Next() {
		if err := rows.Scan(&last.ID, &last.Ms); err != nil {
			return scanners.ScanResult{}, err
		}
		res.Candidates++
		res.Items = append(res.Items, boostArgs{ID: ff.ExecutionID{Partition: req.Partition, UUID: last.ID}})
	}
	if res.Candidates > 0 {
		res.Next, _ = json.Marshal(last)
	}
	return res, rows.Err()
}

func (s starvationBoost) AddWorkers(workers *river.Workers, env *scanners.Env) error {
	return river.AddWorkerSafely(workers, scanners.NewItemWorker(env, func(ctx context.Context, tx pgx.Tx, a boostArgs) (scanners.Output, error) {
		// Lock and recheck: the execution may have been claimed, boosted or
		// deleted since the scan; another transaction may hold it.
		var created int64
		var prio int32
		err := tx.QueryRow(ctx, env.SQL(`SELECT created_at_ms, priority FROM {S}ff_exec_core
			WHERE partition_key = $1 AND execution_id = $2
			  AND lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now'
			FOR NO KEY UPDATE SKIP LOCKED`), a.ID.Partition, a.ID.UUID).Scan(&created, &prio)
		if errors.Is(err, pgx.ErrNoRows) {
			return scanners.Output{Outcome: executions.NoOp}, nil // gone, changed or locked: the next scan decides
		}
		if err != nil {
			return scanners.Output{}, err
		}
		if prio >= 10 || created >= env.NowMs()-s.age.Milliseconds() {
			return scanners.Output{Outcome: executions.NoOp}, nil
		}
		_, err = tx.Exec(ctx, env.SQL(`UPDATE {S}ff_exec_core SET priority = priority + 1
			WHERE partition_key = $1 AND execution_id = $2`), a.ID.Partition, a.ID.UUID)
		return scanners.Output{Outcome: executions.Processed}, err
	}))
}

// A scanner of your own, registered next to the built-ins through
// ffriver.Config.Extra, exactly as they are registered.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDatabaseURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	const schema = "ffriver_example_scanner"
	_, _ = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
	if _, err := migrations.Migrate(ctx, pool, schema, nil); err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`) //nolint:errcheck

	f, err := ffriver.New(ctx, pool, ffriver.Config{
		Schema:   schema,
		Extra:    []scanners.Scanner{starvationBoost{age: time.Minute}},
		Scanners: map[string]scanners.Settings{"starvation_boost": {Interval: 100 * time.Millisecond}},
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
	_, _ = pool.Exec(ctx, dbutil.Schema(schema).SQL(`UPDATE {S}ff_exec_core SET created_at_ms = created_at_ms - 3600000`))

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

func exampleDatabaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/jobopts"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// scanWorker works ff.scan: it selects up to a batch of due items of its
// partition, or of each of its partitions (filter applied in SQL), inserts
// one item job per distinct item not already in flight, re-enqueues a scan
// of a partition after its last candidate when that partition filled the
// batch, and completes itself, all in one transaction.
type scanWorker struct {
	river.WorkerDefaults[jobs.ScanArgs]
	p *Pipeline
}

// Timeout implements river.Worker.
func (w *scanWorker) Timeout(*river.Job[jobs.ScanArgs]) time.Duration { return w.p.env.JobTimeout }

// NextRetry implements river.Worker.
func (w *scanWorker) NextRetry(job *river.Job[jobs.ScanArgs]) time.Time {
	return time.Now().Add(jobopts.RetryDelay(job.Attempt))
}

// Work implements river.Worker.
func (w *scanWorker) Work(ctx context.Context, job *river.Job[jobs.ScanArgs]) error {
	env := w.p.env
	a := job.Args
	s, ok := w.p.reg.Lookup(a.Scanner)
	if !ok {
		return river.JobCancel(fmt.Errorf("scan for scanner %q, which this process has not registered (registered: %v)", a.Scanner, w.p.reg.Names()))
	}
	parts := append([]int16{a.Partition}, a.Partitions...)
	for _, p := range parts {
		if !env.Partitions().Contains(p) {
			return river.JobCancel(ff.Validationf("partition", "%d is outside this schema's 0..%d", p, int(env.Partitions())-1))
		}
	}
	if len(parts) > 1 && len(a.After) > 0 {
		return river.JobCancel(ff.Validationf("after", "a scan of several partitions has no cursor"))
	}
	filter := a.Filter.FF()
	if err := filter.Validate(); err != nil {
		return river.JobCancel(err)
	}
	batch := a.Batch
	if batch <= 0 {
		batch = s.Defaults().Batch
	}
	return inTx(ctx, env, func(tx pgx.Tx) error {
		now := env.NowMs()
		var cursors map[int16]*scanCursor
		if a.SweepMs > 0 {
			var err error
			if cursors, err = lockCursors(ctx, tx, env, s.Name(), jobs.ScanQueue(filter), parts); err != nil {
				return err
			}
		}
		var items []river.JobArgs
		var next []river.InsertManyParams
		out := ScanOutput{}
		// First where each partition's scan reads from, then the scans
		// (one round trip for a BatchScanner), then what each found.
		scans := make([]partitionScan, len(parts))
		for i, p := range parts {
			c := cursors[p] // nil: no scan cursor, read from After
			from := a.After
			catchUp := false
			switch {
			case c == nil:
			case len(a.After) > 0:
				c.sweep = true // a sweep's continuation
			case c.after == nil:
				// No position yet: a cursor scan from the beginning, which
				// counts as a sweep.
				c.sweptAtMs, c.dirty = now, true
			case now-c.sweptAtMs >= a.SweepMs:
				c.sweep, c.sweptAtMs, c.dirty = true, now, true
				out.Sweeps++
			case slices.Contains(a.CatchUp, p) && now-c.sweptAtMs >= a.SweepMs/10:
				// Something has been due for a while: it may lie behind
				// the position (a due time written by a process whose
				// clock is behind this one's, or by a slow commit). The
				// sweep comes early, at most once per tenth of its period.
				c.sweep, c.sweptAtMs, c.dirty = true, now, true
				out.CatchUps++
				catchUp = true
			default:
				from = c.after
			}
			scans[i] = partitionScan{catchUp: catchUp, req: workers.ScanRequest{Store: env.Store, Partition: p, NowMs: now, Limit: batch,
				Filter: filter, Params: a.Params, After: from}}
		}
		if err := runScans(ctx, tx, s, scans); err != nil {
			return err
		}
		for _, sc := range scans {
			p, res, catchUp := sc.req.Partition, sc.res, sc.catchUp
			c := cursors[p]
			if catchUp {
				out.CaughtUp += res.Candidates
			}
			out.Candidates += res.Candidates
			items = append(items, res.Items...)
			filled := res.Candidates >= batch && len(res.Next) > 0
			n := a
			n.Partition, n.Partitions, n.After, n.Round, n.Behind = p, nil, nil, 0, false
			switch {
			case c == nil || c.sweep:
				if filled {
					// This partition continues on its own after its last
					// candidate.
					n.After = res.Next
					next = append(next, scanInsert(n, filter))
				} else if c != nil && res.Candidates > 0 {
					// A sweep that reached the end of what is due: the
					// cursor goes to its end.
					c.after, c.dirty = res.Next, true
				}
			default:
				if res.Candidates > 0 {
					c.after, c.dirty = res.Next, true
				}
				if filled {
					// The next round reads on from the advanced cursor.
					n.Round = a.Round + 1
					next = append(next, scanInsert(n, filter))
				}
			}
		}
		err := saveCursors(ctx, tx, env, s.Name(), jobs.ScanQueue(filter), cursors)
		if err != nil {
			return err
		}
		if out.Inserted, out.Duplicates, err = insertItems(ctx, tx, env, s.Name(), filter, parts, items); err != nil {
			return err
		}
		if len(next) > 0 {
			if _, _, err := apply.InsertMany(ctx, tx, next); err != nil {
				return err
			}
			out.Continued = true
		}
		return complete(ctx, tx, job, out)
	})
}

// insertItems inserts, in tx, an item job for each of items (found by
// scanner, in parts) that is not already in flight: exact duplicates
// dropped, the ones in flight skipped before the insert, each tagged
// (tagItems). It returns how many it inserted and how many were in flight.
func insertItems(ctx context.Context, tx pgx.Tx, env *Env, scanner string, filter ff.Filter, parts []int16, items []river.JobArgs) (inserted, inFlight int, err error) {
	params, err := dedupe(items, itemInsertOpts(filter))
	if err != nil {
		return 0, 0, err
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("ffriver: no River client in the worker context: %w", err)
	}
	params, skipped, err := skipInFlight(ctx, tx, client.Schema(), params)
	if err != nil {
		return 0, 0, err
	}
	if err := tagItems(ctx, tx, env, scanner, filter, parts, params); err != nil {
		return 0, 0, err
	}
	ins, dup, err := apply.InsertMany(ctx, tx, params)
	if err != nil {
		return 0, 0, err
	}
	return ins, dup + skipped, nil
}

// partitionScan is one partition's part of a scan job: its request, and
// its result once run.
type partitionScan struct {
	req     workers.ScanRequest
	catchUp bool
	res     workers.ScanResult
}

// runScans runs scans in tx, in order. A workers.BatchScanner's statements
// go in one round trip: a scan job covers up to every partition (the tick
// groups those with little due), and one round trip each made it the
// slowest hop of a lease's expiry under load (ffctl bench lag at 1,000
// expiries/s on the 2-core VM: scans of 100-250 partitions ran 0.6-1.4 s,
// 0.03 ms of it each partition's statement on the server).
func runScans(ctx context.Context, tx pgx.Tx, s workers.Scanner, scans []partitionScan) error {
	fail := func(i int, err error) error {
		return fmt.Errorf("scanner %s: scanning partition %d: %w", s.Name(), scans[i].req.Partition, err)
	}
	bs, ok := s.(workers.BatchScanner)
	if !ok || len(scans) < 2 {
		for i := range scans {
			var err error
			if scans[i].res, err = s.Scan(ctx, tx, scans[i].req); err != nil {
				return fail(i, err)
			}
		}
		return nil
	}
	qs := make([]workers.ScanQuery, len(scans))
	b := &pgx.Batch{}
	for i := range scans {
		var err error
		if qs[i], err = bs.ScanQuery(scans[i].req); err != nil {
			return fail(i, err)
		}
		b.Queue(qs[i].SQL, qs[i].Args...)
	}
	br := tx.SendBatch(ctx, b)
	for i := range scans {
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return fail(i, dbutil.MapErr(err, "scanning"))
		}
		scans[i].res, err = qs[i].Read(rows) // its errors are mapped
		rows.Close()
		if err != nil {
			_ = br.Close()
			return fail(i, err)
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("scanner %s: %w", s.Name(), dbutil.MapErr(err, "scanning"))
	}
	return nil
}

// Scan cursors (Settings.Sweep; table ff_scan_cursor, migration
// 0005). Without them every tick's scans re-read every due item, including
// the ones whose jobs are still queued: while 20,000 expired leases drained,
// the scans re-read and skipped about 14 items per lease (ffctl bench
// expire), work that grew with the backlog. With them, a scan of a
// partition reads on from the keyset position after the last candidate a
// scan enqueued, so a tick costs what became due since the last one; once
// per sweep period a scan starts from the beginning and finds what the
// position passed over. The cursor row is locked for the scan's
// transaction, so two scans of one partition (a tick's and a
// continuation, or two schedulers') read one after the other, never the
// same range. Nothing depends on the row: deleting it costs one scan from
// the beginning.

// scanCursor is one partition's row, locked by the scan.
type scanCursor struct {
	after     []byte // nil: from the beginning
	sweptAtMs int64
	sweep     bool // this scan reads from the beginning (or continues a sweep)
	dirty     bool
}

// lockCursors creates the missing cursor rows of parts and locks them all,
// in partition order.
func lockCursors(ctx context.Context, tx pgx.Tx, env *Env, scanner, queue string, parts []int16) (map[int16]*scanCursor, error) {
	ps := make([]int32, len(parts))
	for i, p := range parts {
		ps[i] = int32(p)
	}
	if _, err := tx.Exec(ctx, env.SQL(`INSERT INTO {S}ff_scan_cursor (scanner, queue, partition_key)
		SELECT $1, $2, p FROM unnest($3::int[]) AS p ON CONFLICT DO NOTHING`), scanner, queue, ps); err != nil {
		return nil, dbutil.MapErr(err, "creating scan cursors")
	}
	rows, err := tx.Query(ctx, env.SQL(`SELECT partition_key, after::text, swept_at_ms FROM {S}ff_scan_cursor
		WHERE scanner = $1 AND queue = $2 AND partition_key = ANY($3::int[]) ORDER BY partition_key FOR UPDATE`), scanner, queue, ps)
	if err != nil {
		return nil, dbutil.MapErr(err, "locking scan cursors")
	}
	out := map[int16]*scanCursor{}
	for rows.Next() {
		var p int32
		var after *string
		c := &scanCursor{}
		if err := rows.Scan(&p, &after, &c.sweptAtMs); err != nil {
			rows.Close()
			return nil, dbutil.MapErr(err, "locking scan cursors")
		}
		if after != nil {
			c.after = []byte(*after)
		}
		out[int16(p)] = c
	}
	if err := rows.Err(); err != nil {
		return nil, dbutil.MapErr(err, "locking scan cursors")
	}
	return out, nil
}

// saveCursors writes the cursors a scan moved.
func saveCursors(ctx context.Context, tx pgx.Tx, env *Env, scanner, queue string, cursors map[int16]*scanCursor) error {
	var ps []int32
	var afters []*string
	var swept []int64
	for p, c := range cursors {
		if !c.dirty {
			continue
		}
		ps = append(ps, int32(p))
		var a *string
		if c.after != nil {
			v := string(c.after)
			a = &v
		}
		afters = append(afters, a)
		swept = append(swept, c.sweptAtMs)
	}
	if len(ps) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, env.SQL(`UPDATE {S}ff_scan_cursor c SET after = u.after::jsonb, swept_at_ms = u.swept
		FROM unnest($3::int[], $4::text[], $5::bigint[]) AS u(p, after, swept)
		WHERE c.scanner = $1 AND c.queue = $2 AND c.partition_key = u.p`), scanner, queue, ps, afters, swept)
	return dbutil.MapErr(err, "saving scan cursors")
}

// dedupe turns items into insert params, dropping exact duplicates: River
// fails a whole InsertMany that carries one unique key twice.
func dedupe(items []river.JobArgs, opts *river.InsertOpts) ([]river.InsertManyParams, error) {
	seen := map[string]bool{}
	out := make([]river.InsertManyParams, 0, len(items))
	for _, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return nil, fmt.Errorf("encoding item %s: %w", it.Kind(), err)
		}
		key := it.Kind() + "\x00" + string(b)
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, river.InsertManyParams{Args: it, InsertOpts: opts})
	}
	return out, nil
}

package executions

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver/ff"
)

// Coalescing: concurrent Claim calls of one Store (for the same lane,
// capabilities and lease TTL) and concurrent Complete, Fail and Release
// calls are gathered into batches, each batch one transaction, as a
// database's group commit gathers commits. A caller still gets exactly its
// own result, after its own writes committed: its leases, or its typed
// error. What changes is the cost: 64 goroutines looping Claim(Max 1) →
// Complete spend a few transactions per batch instead of two per
// execution, and they no longer contend with each other for the head of
// the claim index (issue 26: the plain API's rate was flat from 8 to 64
// workers because concurrent claimers of one process kept rows the others
// then waited for; see ClaimTx).
//
// A batch runs in a goroutine of its own, started when calls are waiting
// and fewer than inFlight batches run, ending when none are waiting: the
// Store holds no goroutine at rest. Its context carries the values of its
// first call's context and is cancelled once every call in it is settled:
// delivered, handed back to the queue (retry), or given up by its caller.
// So a batch is bounded by its callers' contexts: it outlives none of them
// but the one that lives longest.
//
// A caller whose context ends returns at once. Before its call is in a
// batch it is simply dropped (ctx's error: nothing was written). Once in a
// batch, the batch may still commit its part: the caller gets an
// ff.ErrOutcomeUnknown wrapping ctx's error. A call the batch could not
// serve without waiting for a lock (a Complete whose execution another
// session holds) is handed back with retry: it waits in the queue, holding
// no connection and no lock, and rides a later batch after a backoff,
// until its lock is free or its caller gives up (then it wrote nothing,
// and its caller got ctx's error).

// finishersInFlight is the finish batches (Complete, Fail, Release) a
// Store runs at once on a machine of procs threads: procs/2, at least 2.
// A batch's writes run on one backend, one after the other, so two of
// them used two of the server's cores however many the machine had.
// Finishes of distinct executions take distinct rows: more batches do
// not contend with each other, unlike claims, which share the head of
// their lane (claimersInFlight).
func finishersInFlight(procs int) int { return max(2, procs/2) }

// claimersInFlight is the claim batches of one key a Store runs at once:
// procs/4, at least 2. Concurrent claim batches skip each other's rows at
// the head of the lane; on 2 cores four of them claimed less than two.
func claimersInFlight(procs int) int { return max(2, procs/4) }

// batchSpill is the work waiting that starts a further batch of a
// coalescer while one already runs: a quarter of a full batch (256 calls;
// a claim counts the executions it asks for). A lone call still starts a
// batch at once, and calls that come while every batch allowed runs wait
// as before; between the two, calls that come one by one ride the next
// batch together instead of each starting one of its own. Every batch
// pays its round trips and its commit whatever its size: on 16 cores'
// settings (eight finish and four claim batches allowed at once) batches
// of one or two calls held a runner of 64 workers at 0.42-0.44 of River's
// no-op jobs and the plain API at 0.19-0.23; with this spill 0.66-0.80
// and 0.45-0.52 (ffctl bench lifecycle on 2 cores with GOMAXPROCS=16,
// three alternated rounds; the lent 16-core machine had measured the cap,
// 0.38-0.41 and 0.39-0.47, with those settings). Spills of 32 to 128
// were alike there; on 2 cores 32 was no better than none.
const batchSpill = 64

// coalescer gathers calls of one kind into batches.
type coalescer[Req, Res any] struct {
	// run runs one batch and settles each of its calls once, with
	// deliver or retry, before it returns or later (from a goroutine of
	// its own, which must then use the call's context: ctx is the batch's).
	run      func(ctx context.Context, reqs []Req, d *delivery[Req, Res])
	max      int // most calls per batch
	inFlight int // most batches at once
	// spill is the least work waiting (weight's sum) that starts a
	// further batch while one already runs; 0: any.
	spill int
	// weight is a call's work (nil: 1 a call).
	weight func(Req) int

	mu      sync.Mutex
	queue   []*call[Req, Res]
	queued  int // the queue's weight
	running int
	// retries counts the calls handed back (retry).
	retries atomic.Int64
}

type result[Res any] struct {
	res Res
	err error
}

type call[Req, Res any] struct {
	ctx  context.Context
	req  Req
	done chan struct{}
	out  result[Res]
	// Under the coalescer's mu: the batch the call is in and its index
	// there (nil while queued or waiting to retry), whether its caller gave
	// up, and how often it was handed back.
	batch *batch
	index int
	gone  bool
	tries int
}

// batch is one running batch's cancellation: cancelled once each of its
// calls is settled.
type batch struct {
	cancel  context.CancelFunc
	settled []atomic.Bool
	left    atomic.Int64
	// delivered counts deliveries under the ffunboundedbatch tag, where
	// only all of them, or all callers giving up, cancel the batch.
	delivered atomic.Int64
}

// settle marks call i of the batch settled; the last one cancels the
// batch's context.
func (b *batch) settle(i int) {
	if b.settled[i].CompareAndSwap(false, true) && b.left.Add(-1) == 0 {
		b.cancel()
	}
}

// do runs req in a batch and returns its result.
func (c *coalescer[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	cl := &call[Req, Res]{ctx: ctx, req: req, done: make(chan struct{})}
	c.enqueue(cl)
	select {
	case <-cl.done:
		return cl.out.res, cl.out.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	cl.gone = true
	b, i := cl.batch, cl.index
	if b == nil { // queued: drop it (waiting to retry: its timer drops it)
		for j, q := range c.queue {
			if q == cl {
				c.queue = append(c.queue[:j], c.queue[j+1:]...)
				c.queued -= c.weigh(cl.req)
				break
			}
		}
	}
	c.mu.Unlock()
	var zero Res
	if b == nil {
		return zero, ctx.Err()
	}
	select {
	case <-cl.done: // finished meanwhile
		return cl.out.res, cl.out.err
	default:
	}
	b.settle(i)
	return zero, ff.OutcomeUnknown("giving up on a call in a batch", context.Cause(ctx))
}

// enqueue queues cl and starts a batch loop when none runs, or when fewer
// than inFlight run and at least spill work waits.
func (c *coalescer[Req, Res]) enqueue(cl *call[Req, Res]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl.gone {
		return
	}
	c.queue = append(c.queue, cl)
	c.queued += c.weigh(cl.req)
	if c.running == 0 || c.running < c.inFlight && c.queued >= c.spill {
		c.running++
		go c.loop()
	}
}

// weigh is req's work, which spill counts.
func (c *coalescer[Req, Res]) weigh(req Req) int {
	if c.weight == nil {
		return 1
	}
	return c.weight(req)
}

// loop runs batches until no call is waiting.
func (c *coalescer[Req, Res]) loop() {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.running--
			c.mu.Unlock()
			return
		}
		n := min(len(c.queue), c.max)
		calls := make([]*call[Req, Res], n)
		copy(calls, c.queue[:n])
		c.queue = append(c.queue[:0], c.queue[n:]...)
		ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
		b := &batch{cancel: cancel, settled: make([]atomic.Bool, n)}
		b.left.Store(int64(n))
		for i, cl := range calls {
			cl.batch, cl.index = b, i
			c.queued -= c.weigh(cl.req)
		}
		c.mu.Unlock()

		reqs := make([]Req, n)
		for i, cl := range calls {
			reqs[i] = cl.req
		}
		c.run(ctx, reqs, &delivery[Req, Res]{c: c, b: b, calls: calls})
	}
}

// delivery is how a batch settles its calls.
type delivery[Req, Res any] struct {
	c     *coalescer[Req, Res]
	b     *batch
	calls []*call[Req, Res]
}

// deliver gives call i its result.
func (d *delivery[Req, Res]) deliver(i int, r result[Res]) {
	d.calls[i].out = r
	close(d.calls[i].done)
	if unboundedBatch {
		if d.b.delivered.Add(1) == int64(len(d.calls)) {
			d.b.cancel()
		}
		return
	}
	d.b.settle(i)
}

// ctx is call i's own context, for work a batch does for that call alone
// after the batch itself has moved on.
func (d *delivery[Req, Res]) ctx(i int) context.Context { return d.calls[i].ctx }

// retryBackoff is how long a call handed back waits before it joins the
// queue again: 1 ms doubling with each try, at most maxRetryBackoff.
func retryBackoff(tries int) time.Duration {
	return min(time.Millisecond<<min(tries, 16), maxRetryBackoff)
}

// maxRetryBackoff bounds the wait of a call handed back: once its lock is
// free, it is served within about this long.
const maxRetryBackoff = 50 * time.Millisecond

// retry hands call i back: nothing of it was written, and it joins the
// queue again after a backoff, unless its caller has given up.
func (d *delivery[Req, Res]) retry(i int) {
	cl := d.calls[i]
	d.c.retries.Add(1)
	d.c.mu.Lock()
	cl.batch = nil
	cl.tries++
	gone, wait := cl.gone, retryBackoff(cl.tries)
	d.c.mu.Unlock()
	d.b.settle(i)
	if !gone {
		time.AfterFunc(wait, func() { d.c.enqueue(cl) })
	}
}

// keyed holds one value per key, made on first use.
type keyed[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

func (k *keyed[K, V]) get(key K, make func(K) V) V {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[key]
	if !ok {
		if k.m == nil {
			k.m = map[K]V{}
		}
		v = make(key)
		k.m[key] = v
	}
	return v
}

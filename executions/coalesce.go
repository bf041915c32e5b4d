package executions

import (
	"context"
	"sync"
	"sync/atomic"
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
// first call's context and is cancelled only once every caller in the
// batch has given up waiting (a caller whose context ends before its call
// is in a batch is simply dropped).

// coalescer gathers calls of one kind into batches.
type coalescer[Req, Res any] struct {
	// run runs one batch and calls deliver once for each of its calls,
	// before it returns or later (a call it hands to a goroutine of its
	// own, so that the next batch need not wait for it). The batch's
	// context lives until every call is delivered.
	run      func(ctx context.Context, reqs []Req, deliver func(i int, r result[Res]))
	max      int // most calls per batch
	inFlight int // most batches at once

	mu      sync.Mutex
	queue   []*call[Req, Res]
	running int
}

type result[Res any] struct {
	res Res
	err error
}

type call[Req, Res any] struct {
	ctx   context.Context
	req   Req
	done  chan struct{}
	out   result[Res]
	batch *batch // set once the call is in a batch
}

// batch is one running batch's cancellation: cancelled when its last
// waiting caller gives up.
type batch struct {
	cancel  context.CancelFunc
	mu      sync.Mutex
	waiting int
}

func (b *batch) leave() {
	b.mu.Lock()
	b.waiting--
	last := b.waiting == 0
	b.mu.Unlock()
	if last {
		b.cancel()
	}
}

// do runs req in a batch and returns its result.
func (c *coalescer[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	cl := &call[Req, Res]{ctx: ctx, req: req, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, cl)
	if c.running < c.inFlight {
		c.running++
		go c.loop()
	}
	c.mu.Unlock()
	select {
	case <-cl.done:
		return cl.out.res, cl.out.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	b := cl.batch
	if b == nil { // not taken yet: drop it
		for i, q := range c.queue {
			if q == cl {
				c.queue = append(c.queue[:i], c.queue[i+1:]...)
				break
			}
		}
	}
	c.mu.Unlock()
	if b != nil {
		select {
		case <-cl.done: // finished meanwhile
			return cl.out.res, cl.out.err
		default:
		}
		b.leave()
	}
	var zero Res
	return zero, ctx.Err()
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
		b := &batch{cancel: cancel, waiting: n}
		for _, cl := range calls {
			cl.batch = b
		}
		c.mu.Unlock()

		reqs := make([]Req, n)
		for i, cl := range calls {
			reqs[i] = cl.req
		}
		var left atomic.Int64
		left.Store(int64(n))
		c.run(ctx, reqs, func(i int, r result[Res]) {
			calls[i].out = r
			close(calls[i].done)
			if left.Add(-1) == 0 {
				cancel()
			}
		})
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

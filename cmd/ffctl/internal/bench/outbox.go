package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/outbox"
)

// OutboxOptions size the outbox scenario.
type OutboxOptions struct {
	Writers   int           // concurrent writers (default 32)
	PerWriter int           // leases each writer renews in turn (default 16)
	Duration  time.Duration // per variant (default 10s)
}

// Outbox measures the same transition (Renew: lock, fence, extend the lease)
// with and without its outbox row, at Writers concurrent writers. Target:
// with ≥ 85 % of without.
func Outbox(ctx context.Context, env *Env, o OutboxOptions) ([]Result, error) {
	if o.Writers == 0 {
		o.Writers = 32
	}
	if o.PerWriter == 0 {
		o.PerWriter = 16
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	pool, schema, cleanup, err := env.scratch(ctx, "outbox", int32(o.Writers+4))
	if err != nil {
		return nil, err
	}
	defer cleanup()
	with, err := executions.Open(ctx, pool, executions.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	w, err := outbox.NewWriter(schema)
	if err != nil {
		return nil, err
	}
	without, err := executions.Open(ctx, pool, executions.Config{Schema: schema, Outbox: w.Discarding()})
	if err != nil {
		return nil, err
	}
	n := o.Writers * o.PerWriter
	for i := range n {
		if _, err := with.Create(ctx, executions.CreateParams{Lane: fmt.Sprintf("bench-%d", i%o.Writers)}); err != nil {
			return nil, err
		}
	}
	leases := make([][]executions.Lease, o.Writers)
	for wk := range o.Writers {
		leases[wk], err = with.Claim(ctx, executions.ClaimParams{Lane: fmt.Sprintf("bench-%d", wk), LeaseTTL: time.Hour, Max: o.PerWriter})
		if err != nil {
			return nil, err
		}
	}
	renew := func(st *executions.Store) func(ctx context.Context, wk, i int) error {
		return func(ctx context.Context, wk, i int) error {
			ls := leases[wk]
			l, err := st.Renew(ctx, ls[i%len(ls)], time.Hour)
			if err != nil {
				return err
			}
			ls[i%len(ls)] = l
			return nil
		}
	}
	// The variants alternate in short rounds (without, with, with, without,
	// …), so drift of the server's state over the run (checkpoints,
	// autovacuum, other load) falls on both alike.
	const rounds = 6
	round := o.Duration / (rounds / 2)
	var base, val float64
	env.Logger.InfoContext(ctx, "bench outbox: renewing with and without the outbox, alternating",
		"writers", o.Writers, "rounds", rounds, "each", round)
	for r := range rounds {
		st, sum := without, &base
		if (r%4 == 1) || (r%4 == 2) {
			st, sum = with, &val
		}
		rate, err := measure(ctx, o.Writers, round, renew(st))
		if err != nil {
			return nil, fmt.Errorf("outbox bench (round %d): %w", r, err)
		}
		*sum += rate / (rounds / 2)
	}
	// 0 when the baseline's rounds fitted no renewal (a machine busy with
	// something else, or a tiny Duration): no ratio, rather than a NaN
	// the JSON report cannot hold.
	ratio := ratioF(val, base)
	return []Result{{
		Scenario: "outbox", Figure: fmt.Sprintf("renew with outbox row, %d writers", o.Writers),
		Value: val, Unit: "tx/s", Baseline: "same renew without the row", BaselineValue: base, Ratio: ratio,
		Target: "≥ 0.85", Met: met(ratio >= 0.85),
	}}, nil
}

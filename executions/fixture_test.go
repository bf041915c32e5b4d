package executions_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
)

// t0 is where the fixture's manual clock starts: a fixed instant so
// timestamps are exact.
const t0 = fftest.StartMs

// fixture is the test kit (fftest.Kit: Create, ClaimOne, WantState,
// WantEvents, InTx, …) with the short names these tests use for its
// parts.
type fixture struct {
	*fftest.Kit
	t     *testing.T
	ctx   context.Context
	db    *fftest.Schema
	st    *executions.Store
	clock *ff.ManualClock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return kitFixture(t, fftest.New(t, nil))
}

// kitFixture is the fixture of k.
func kitFixture(t *testing.T, k *fftest.Kit) *fixture {
	return &fixture{Kit: k, t: t, ctx: k.Ctx, db: k.Schema, st: k.Store, clock: k.Clock}
}

// state is the five state columns, in the order phase, ownership,
// eligibility, attempt, public.
type state = fftest.State

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
}

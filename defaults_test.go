package ffriver

import (
	"runtime"
	"testing"

	"github.com/ffriver/ffriver/internal/apply"
)

// The defaults follow the rule in defaults.go: lanes P/2 within [4, 32],
// bounded by a given pool (never below 2); apply workers lanes × four times
// the group size; pools give the lanes their connections.
func TestDefaultsFollowTheMachine(t *testing.T) {
	for _, c := range []struct {
		procs    int
		maxConns int32
		want     int
	}{
		{1, 0, 4}, {2, 0, 4}, {4, 0, 4}, {8, 0, 4}, {10, 0, 5}, {16, 0, 8}, {64, 0, 32}, {256, 0, 32},
		{16, 22, 8}, {16, 12, 4}, {16, 5, 2}, {2, 5, 2}, {2, 10, 3}, {64, 38, 17},
	} {
		if got := groupLanes(c.procs, c.maxConns); got != c.want {
			t.Errorf("groupLanes(%d procs, pool %d) = %d, want %d", c.procs, c.maxConns, got, c.want)
		}
	}
	lanes := groupLanes(runtime.GOMAXPROCS(0), 0)
	if DefaultGroupLanes() != lanes || DefaultApplyWorkers() != lanes*4*apply.DefaultGroupSize {
		t.Errorf("DefaultGroupLanes %d, DefaultApplyWorkers %d at GOMAXPROCS %d", DefaultGroupLanes(), DefaultApplyWorkers(), runtime.GOMAXPROCS(0))
	}
	for _, c := range []struct {
		scan, apply, lanes int
		want               int32
	}{
		{2, 128, 2, 22}, {2, 512, 8, 22}, {2, 1024, 16, 38}, {2, 8, 2, 14}, {4, 16, 0, 24},
	} {
		if got := PoolConnsWithLanes(c.scan, c.apply, c.lanes); got != c.want {
			t.Errorf("PoolConnsWithLanes(%d, %d, %d) = %d, want %d", c.scan, c.apply, c.lanes, got, c.want)
		}
	}
	// The binaries' defaults fit the pool they size: New keeps the
	// machine's lanes on a pool of PoolConns.
	for procs := 1; procs <= 128; procs++ {
		l := groupLanes(procs, 0)
		if got := groupLanes(procs, PoolConnsWithLanes(2, l*4*apply.DefaultGroupSize, l)); got != l {
			t.Errorf("%d procs: %d lanes, but %d on the pool PoolConns sizes for them", procs, l, got)
		}
	}
}

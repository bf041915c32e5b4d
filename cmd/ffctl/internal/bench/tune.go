package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/ff"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TuneOptions size the tune sweep.
type TuneOptions struct {
	// Leases drained per run (default 10,000).
	Leases int
	// Lanes and ApplyWorkers are the grid: every pair is one setting
	// (default: half, the same and twice ffriver's defaults on this
	// machine, DefaultGroupLanes and DefaultApplyWorkers). The defaults
	// are always tried, in the grid or beside it.
	Lanes, ApplyWorkers []int
	// Rounds: drains of each setting, interleaved (each round runs every
	// setting, in reverse order every other round); a setting's figure is
	// the mean of its rounds (default 2).
	Rounds int
}

// tuneSetting is one point of the grid.
type tuneSetting struct{ lanes, apply int }

func (s tuneSetting) String() string {
	lanes := "lanes"
	if s.lanes == 1 {
		lanes = "lane"
	}
	return fmt.Sprintf("%d group %s, %d apply workers", s.lanes, lanes, s.apply)
}

// TuneGrid is the grid Tune sweeps by default: half, the same and twice
// the default lanes and apply workers (at least 1 lane, 16 workers).
func TuneGrid() (lanes, apply []int) {
	l, a := ffriver.DefaultGroupLanes(), ffriver.DefaultApplyWorkers()
	return slices.Compact([]int{max(l/2, 1), l, 2 * l}), slices.Compact([]int{max(a/2, 16), a, 2 * a})
}

// Tune runs the expire drain (expirePipeline, as the expire scenario's
// pipeline figure) once per round for every (group lanes, apply workers)
// setting of the grid and the defaults, on one scratch schema emptied
// between runs, and reports each setting's leases/s beside the best one
// found and the defaults' ratio to it. Target: the defaults at least 0.90
// of the best (issue 38).
func Tune(ctx context.Context, env *Env, o TuneOptions) ([]Result, error) {
	if o.Leases == 0 {
		o.Leases = 10_000
	}
	if o.Rounds == 0 {
		o.Rounds = 2
	}
	dl, da := TuneGrid()
	if len(o.Lanes) == 0 {
		o.Lanes = dl
	}
	if len(o.ApplyWorkers) == 0 {
		o.ApplyWorkers = da
	}
	if o.Leases < 0 || o.Rounds < 0 || slices.Min(o.Lanes) < 1 || slices.Min(o.ApplyWorkers) < 1 {
		return nil, ff.Validationf("tune bench", "sizes must be positive")
	}
	def := tuneSetting{ffriver.DefaultGroupLanes(), ffriver.DefaultApplyWorkers()}
	var grid []tuneSetting
	for _, l := range o.Lanes {
		for _, a := range o.ApplyWorkers {
			grid = append(grid, tuneSetting{l, a})
		}
	}
	if !slices.Contains(grid, def) {
		grid = append(grid, def)
	}
	pool, schema, cleanup, err := env.scratch(ctx, "tune", 4)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	rates := make(map[tuneSetting][]float64, len(grid))
	for r := range o.Rounds {
		order := slices.Clone(grid)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			if err := resetTune(ctx, pool); err != nil {
				return nil, err
			}
			env.Logger.InfoContext(ctx, "bench tune: draining", "round", r+1, "lanes", s.lanes, "apply_workers", s.apply, "leases", o.Leases)
			d, err := expirePipeline(ctx, env, pool, schema, ExpireOptions{Leases: o.Leases,
				Pipeline: PipelineOptions{GroupLanes: s.lanes, ApplyWorkers: s.apply}})
			if err != nil {
				return nil, fmt.Errorf("tune bench (%s): %w", s, err)
			}
			rates[s] = append(rates[s], d.rate)
		}
	}
	mean := func(s tuneSetting) float64 {
		sum := 0.0
		for _, v := range rates[s] {
			sum += v
		}
		return sum / float64(len(rates[s]))
	}
	best := grid[0]
	for _, s := range grid {
		if mean(s) > mean(best) {
			best = s
		}
	}
	var results []Result
	for _, s := range grid {
		figure := "expire drain, " + s.String()
		if s == def {
			figure += " (the defaults)"
		}
		runs := make([]string, len(rates[s]))
		for i, v := range rates[s] {
			runs[i] = fmt.Sprintf("%.0f", v)
		}
		r := Result{Scenario: "tune", Figure: figure, Value: mean(s), Unit: "leases/s",
			Baseline: "best: " + best.String(), BaselineValue: mean(best), Ratio: mean(s) / mean(best)}
		if len(runs) > 1 {
			r.Note = fmt.Sprintf("mean of %d drains of %d leases: %s leases/s", len(runs), o.Leases, strings.Join(runs, ", "))
		}
		results = append(results, r)
	}
	ratio := mean(def) / mean(best)
	results = append(results, Result{Scenario: "tune", Figure: "the defaults (" + def.String() + ") against the best found", Value: mean(def), Unit: "leases/s",
		Baseline: "best: " + best.String(), BaselineValue: mean(best), Ratio: ratio, Target: "≥ 0.90", Met: met(ratio >= 0.9)})
	return results, nil
}

// resetTune empties what a drain of the tune sweep leaves: the expire
// scenario's tables, River's jobs (the next pipeline's first tick is then
// its own) and the scan cursors.
func resetTune(ctx context.Context, pool *pgxpool.Pool) error {
	if err := resetExpire(ctx, pool); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `TRUNCATE river_job, ff_scan_cursor`)
	return err
}

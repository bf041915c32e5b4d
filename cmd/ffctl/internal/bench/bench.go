// Package bench runs the performance scenarios behind `ffctl bench`: each
// measures an ffriver figure and, in the same run on the same database, the
// baseline it is judged against, and reports the ratio and the target.
//
// Every scenario works in a scratch schema of its own, migrated at the start
// and dropped at the end.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Result is one row of the bench table.
type Result struct {
	Scenario string  `json:"scenario"`
	Figure   string  `json:"figure"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	// Baseline is what Value is compared with, measured in the same run.
	Baseline      string  `json:"baseline,omitempty"`
	BaselineValue float64 `json:"baseline_value,omitempty"`
	// Ratio is Value / BaselineValue (0 when there is no baseline).
	Ratio float64 `json:"ratio,omitempty"`
	// Target in words, and whether this run met it.
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	Note   string `json:"note,omitempty"`
}

// Env is what every scenario needs.
type Env struct {
	// URL of the database; each scenario opens its own pools.
	URL    string
	Logger *slog.Logger
	// Keep leaves the scratch schemas in place.
	Keep bool
	// Prefix of the scratch schemas' and databases' names (default
	// "ffbench_").
	Prefix string
}

func (e *Env) prefix() string {
	if e.Prefix == "" {
		return "ffbench_"
	}
	return e.Prefix
}

// Machine describes where the bench ran, for docs/performance.md.
func Machine(ctx context.Context, pool *pgxpool.Pool) string {
	var version string
	_ = pool.QueryRow(ctx, "SHOW server_version").Scan(&version)
	return fmt.Sprintf("%d CPU (%s/%s), Go %s, PostgreSQL %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH,
		strings.TrimPrefix(runtime.Version(), "go"), version)
}

// scratch creates and migrates a scratch schema and returns a pool on it
// with maxConns connections, and a cleanup that drops it (unless Keep).
func (e *Env) scratch(ctx context.Context, name string, maxConns int32) (*pgxpool.Pool, string, func(), error) {
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	schema := e.prefix() + name + "_" + hex.EncodeToString(rnd[:])
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		return nil, "", nil, fmt.Errorf("bench: database url: %w", err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = "ffctl-bench"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", nil, fmt.Errorf("bench: connecting: %w", err)
	}
	if _, err := migrations.Migrate(ctx, pool, schema, &migrations.Options{Partitions: ff.DefaultPartitions, RiverSchema: schema}); err != nil {
		pool.Close()
		return nil, "", nil, err
	}
	cleanup := func() {
		if !e.Keep {
			_, _ = pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA "`+schema+`" CASCADE`)
		}
		pool.Close()
	}
	return pool, schema, cleanup, nil
}

func met(ok bool) *bool { return &ok }

// WriteTable prints results as an aligned text table.
func WriteTable(w io.Writer, machine string, results []Result) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "machine: %s\n\n", machine)
	fmt.Fprintln(tw, "scenario\tfigure\tvalue\tbaseline\tbaseline value\tratio\ttarget\tmet")
	for _, r := range results {
		ratio, bv, m := "", "", ""
		if r.BaselineValue != 0 {
			bv = fmtNum(r.BaselineValue, r.Unit)
		}
		if r.Ratio != 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		if r.Met != nil {
			m = map[bool]string{true: "yes", false: "NO"}[*r.Met]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Figure, fmtNum(r.Value, r.Unit), r.Baseline, bv, ratio, r.Target, m)
	}
	for _, r := range results {
		if r.Note != "" {
			fmt.Fprintf(tw, "\nnote (%s, %s): %s", r.Scenario, r.Figure, r.Note)
		}
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}

// WriteJSON prints results as one JSON document.
func WriteJSON(w io.Writer, machine string, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Machine string   `json:"machine"`
		Results []Result `json:"results"`
	}{machine, results})
}

func fmtNum(v float64, unit string) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 1:
		return fmt.Sprintf("%.1f %s", v, unit)
	default:
		return fmt.Sprintf("%.3f %s", v, unit)
	}
}

// measure runs fn on n goroutines for d and returns operations per second.
func measure(ctx context.Context, n int, d time.Duration, fn func(ctx context.Context, worker int, i int) error) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	counts := make([]int, n)
	errs := make(chan error, n)
	start := time.Now()
	for w := range n {
		go func() {
			for i := 0; ; i++ {
				if ctx.Err() != nil {
					errs <- nil
					return
				}
				if err := fn(ctx, w, i); err != nil {
					if ctx.Err() != nil {
						errs <- nil
						return
					}
					errs <- err
					cancel()
					return
				}
				counts[w]++
			}
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	elapsed := time.Since(start)
	total := 0
	for _, c := range counts {
		total += c
	}
	return float64(total) / elapsed.Seconds(), first
}

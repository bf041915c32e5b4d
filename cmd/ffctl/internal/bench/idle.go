package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/scanners"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// IdleOptions size the idle scenario.
type IdleOptions struct {
	// Duration of the measured window (default 60 s), after a warm-up.
	Duration time.Duration
	// InProcess runs the scheduler and the worker as River clients in this
	// process (CPU from getrusage) instead of the real binaries (built with
	// `go build` from the module in the working directory; CPU from
	// /proc/<pid>/stat). It is also the fallback when they cannot be built.
	InProcess bool
	// Pipeline sizes the in-process pipeline (default: the binaries').
	Pipeline PipelineOptions
}

// idleTarget is the CPU budget of an idle scheduler and worker.
const idleTarget = 3.0 // % of one core

// Idle measures what ffriver costs when there is nothing to do: a migrated
// schema with 256 partitions and no executions, one ffscheduler and one
// ffworker at their defaults (every built-in scanner ticking), for
// Duration after a warm-up. Figures: the two processes' CPU in % of one
// core (target < 3 %), and the server's transactions per second over the
// window (pg_stat_database xact_commit + xact_rollback). When it can, the
// scenario creates a scratch database for this, so the count holds the
// pipeline's transactions only (the bench reads the counters from another
// database); otherwise the count is of the whole database and includes other
// sessions', which the note says.
func Idle(ctx context.Context, env *Env, o IdleOptions) ([]Result, error) {
	if o.Duration == 0 {
		o.Duration = 60 * time.Second
	}
	if o.Duration < 0 {
		return nil, ff.Validationf("idle bench", "duration must be positive")
	}
	var notes []string

	// A database of its own, if we may create one.
	denv, dbName, dropDB, err := env.scratchDatabase(ctx)
	if err != nil {
		notes = append(notes, "no scratch database ("+err.Error()+"): the transaction count is the whole database's, other sessions included")
		denv, dbName = env, ""
	} else {
		defer dropDB()
	}
	pool, schema, cleanup, err := denv.scratch(ctx, "idle", 4)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	mode := "binaries ffscheduler + ffworker"
	var cpu func() (time.Duration, error)
	var stop func()
	if !o.InProcess {
		cpu, stop, err = startBinaries(ctx, denv, schema)
		if err != nil {
			notes = append(notes, "binaries not run ("+err.Error()+"); in-process clients measured instead")
			o.InProcess = true
		}
	}
	if o.InProcess {
		mode = "in-process scheduler + worker clients"
		p, err := startPipeline(ctx, denv, schema, o.Pipeline)
		if err != nil {
			return nil, err
		}
		stop = p.stop
		cpu = selfCPU
	}
	defer stop()

	env.Logger.InfoContext(ctx, "bench idle: warming up", "mode", mode)
	if err := awaitTick(ctx, pool, scanners.AttemptTimeout, 60*time.Second); err != nil {
		return nil, err
	}
	// Past River's start-up (leader election, staggered maintenance).
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return nil, err
	}

	statDB := dbName
	if statDB == "" {
		if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&statDB); err != nil {
			return nil, err
		}
	}
	// Read from the bench's own database, so the reads are not counted in
	// the scratch database.
	statPool, err := pgxpool.New(ctx, env.URL)
	if err != nil {
		return nil, err
	}
	defer statPool.Close()
	xacts := func() (int64, error) {
		var n int64
		// pg_stat_database is a snapshot per transaction; each query is one.
		err := statPool.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, statDB).Scan(&n)
		return n, err
	}
	env.Logger.InfoContext(ctx, "bench idle: measuring", "for", o.Duration, "mode", mode)
	c0, err := cpu()
	if err != nil {
		return nil, err
	}
	x0, err := xacts()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, o.Duration); err != nil {
		return nil, err
	}
	c1, err := cpu()
	if err != nil {
		return nil, err
	}
	x1, err := xacts()
	if err != nil {
		return nil, err
	}
	window := time.Since(t0)
	pct := 100 * (c1 - c0).Seconds() / window.Seconds()
	tps := float64(x1-x0) / window.Seconds()

	var jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE finalized_at >= now() - $1::interval`, window.String()).Scan(&jobs); err != nil {
		return nil, err
	}
	notes = append(notes, fmt.Sprintf("%s, 256 partitions, nothing due, every built-in scanner at its defaults; window %.0f s after warm-up; %d River jobs finished in it (%.1f/s).",
		mode, window.Seconds(), jobs, float64(jobs)/window.Seconds()))
	if dbName != "" {
		notes = append(notes, "transactions counted in a scratch database holding only this pipeline (server statistics are flushed about once a second, so the count is approximate at the edges of the window).")
	}
	return []Result{
		{Scenario: "idle", Figure: "scheduler + worker CPU, 256 partitions, nothing due", Value: pct, Unit: "% of a core",
			Target: fmt.Sprintf("< %.0f %%", idleTarget), Met: met(pct < idleTarget), Note: strings.Join(notes, " ")},
		{Scenario: "idle", Figure: "Postgres transactions while idle", Value: tps, Unit: "tx/s"},
	}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// selfCPU is this process's user + system CPU time.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// procCPU is a process's user + system CPU time from /proc/<pid>/stat
// (clock ticks of USER_HZ, 100 on Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bench: unexpected /proc stat format")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("bench: unexpected /proc stat format")
	}
	// Fields after the command: state is 0, utime 11, stime 12.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bench: unexpected /proc stat format")
	}
	return time.Duration(ut+st) * (time.Second / 100), nil
}

// startBinaries builds ffscheduler and ffworker from the module in the
// working directory and starts them on schema with their default flags
// (River UI off). It returns their summed CPU time and a stop.
func startBinaries(ctx context.Context, env *Env, schema string) (func() (time.Duration, error), func(), error) {
	dir, err := buildBinaries(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	ps, err := startProcs(env, dir, schema, 1)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() { ps.stop(); _ = os.RemoveAll(dir) }
	return ps.cpu, stop, nil
}

// buildBinaries builds ffscheduler and ffworker into a new temporary
// directory, which the caller removes.
func buildBinaries(ctx context.Context, env *Env) (string, error) {
	dir, err := os.MkdirTemp("", "ffbench-bin-")
	if err != nil {
		return "", err
	}
	env.Logger.InfoContext(ctx, "bench: building ffscheduler and ffworker", "dir", dir)
	build := exec.CommandContext(ctx, "go", "build", "-o", dir, "github.com/ffriver/ffriver/cmd/ffscheduler", "github.com/ffriver/ffriver/cmd/ffworker")
	if out, err := build.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go build: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return dir, nil
}

// procs are an ffscheduler and its ffworkers, run from built binaries.
type procs struct{ cmds []*exec.Cmd }

// startProcs starts the ffscheduler and workers ffworkers of dir on schema,
// with their default flags (River UI off).
func startProcs(env *Env, dir, schema string, workers int) (*procs, error) {
	ps := &procs{}
	names := []string{"ffscheduler"}
	for range workers {
		names = append(names, "ffworker")
	}
	for i, name := range names {
		args := []string{"--schema", schema, "--log-level", "warn"}
		if name == "ffscheduler" {
			args = append(args, "--ui-addr", "off")
		} else {
			args = append(args, "--id", fmt.Sprintf("ffbench-worker-%d", i))
		}
		c := exec.Command(filepath.Join(dir, name), args...)
		c.Env = append(os.Environ(), "DATABASE_URL="+env.URL)
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			ps.stop()
			return nil, err
		}
		ps.cmds = append(ps.cmds, c)
	}
	return ps, nil
}

// stop stops the processes gracefully (SIGTERM), killing those that take
// longer than 40 s.
func (ps *procs) stop() {
	for _, c := range ps.cmds {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range ps.cmds {
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
}

// cpu is the processes' summed user + system CPU time.
func (ps *procs) cpu() (time.Duration, error) {
	var sum time.Duration
	for _, c := range ps.cmds {
		if c.ProcessState != nil {
			return 0, fmt.Errorf("bench: %s exited", c.Path)
		}
		d, err := procCPU(c.Process.Pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// peakRSS is the peak resident set (VmHWM) of process i, in bytes.
func (ps *procs) peakRSS(i int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", ps.cmds[i].Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("bench: no VmHWM in /proc status")
}

// scratchDatabase creates a database of its own for a scenario and returns
// an Env on it, its name and a drop; it fails when the URL is not a URL or
// the role may not create databases.
func (e *Env) scratchDatabase(ctx context.Context) (*Env, string, func(), error) {
	u, err := url.Parse(e.URL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, "", nil, errors.New("the database URL is not a postgres:// URL")
	}
	conn, err := pgx.Connect(ctx, e.URL)
	if err != nil {
		return nil, "", nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	name := e.prefix() + "idle_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	if _, err := conn.Exec(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		return nil, "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		if e.Keep {
			return
		}
		c, err := pgx.Connect(context.WithoutCancel(ctx), e.URL)
		if err != nil {
			return
		}
		defer c.Close(context.WithoutCancel(ctx))
		_, _ = c.Exec(context.WithoutCancel(ctx), `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
	}
	return &Env{URL: u.String(), Logger: e.Logger, Keep: e.Keep}, name, drop, nil
}

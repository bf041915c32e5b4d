package leasecheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ffriver/ffriver/internal/testproc"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Binaries are the built ffscheduler and ffworker.
type Binaries struct{ Scheduler, Worker string }

// BuildBinaries builds ffscheduler and ffworker into dir, with the test
// binary's build tags (testproc.Build).
func BuildBinaries(ctx context.Context, dir string) (Binaries, error) {
	bins, err := testproc.Build(ctx, dir, "ffscheduler", "ffworker")
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{Scheduler: bins["ffscheduler"], Worker: bins["ffworker"]}, nil
}

// binaryFlags are the flags of ffscheduler or ffworker: short scanner
// intervals, and a job timeout and rescue delay short enough that a killed
// process's jobs are redone soon (as the fault suite runs them).
func binaryFlags(scheduler bool) []string {
	if scheduler {
		return []string{"--ui-addr", "off", "--scan-concurrency", "2", "--job-timeout", "3s", "--rescue-after", "4s",
			"--attempt-timeout-interval", "250ms", "--delayed-promoter-interval", "250ms", "--execution-deadline-interval", "250ms",
			"--edge-cancel-dispatcher-interval", "300ms", "--edge-cancel-reconciler-interval", "2s", "--dependency-interval", "2s"}
	}
	return []string{"--concurrency", "16", "--scan-concurrency", "1", "--job-timeout", "3s"}
}

// Cluster is a run's ffscheduler and ffworker processes. Their connections
// carry application_name <tag>-<id>, so faults can find them.
type Cluster struct {
	bins   Binaries
	url    string
	schema string
	tag    string

	// outboxRetention is the scheduler's --outbox-retention (0: its
	// default), execRetention its --execution-retention.
	outboxRetention, execRetention time.Duration
	// skew: each binary started gets a clock offset drawn from
	// [-skew/2, skew/2) by rng ($FF_CLOCK_OFFSET), as the application
	// processes do (Faults.BinaryClockSkew).
	skew time.Duration
	rng  *rand.Rand

	mu      sync.Mutex
	procs   map[string]*member
	seq     int
	notes   []string
	offsets []time.Duration
}

type member struct {
	id        string
	scheduler bool
	proc      *testproc.Proc
	killed    bool
}

// NewCluster prepares a cluster on schema; tag prefixes its application
// names.
func NewCluster(bins Binaries, dbURL, schema, tag string) *Cluster {
	return &Cluster{bins: bins, url: dbURL, schema: schema, tag: tag, procs: map[string]*member{}}
}

// Skew makes every binary started from now on run with its clock offset by
// up to skew/2 either way, drawn from seed.
func (c *Cluster) Skew(skew time.Duration, seed uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew, c.rng = skew, rand.New(rand.NewPCG(seed, 7))
}

// OutboxRetention makes every scheduler started from now on keep outbox
// events for d, its partitions rotating every outboxRetentionInterval.
func (c *Cluster) OutboxRetention(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outboxRetention = d
}

// ExecutionRetention makes every scheduler started from now on remove
// executions terminal for longer than d, its pass every
// executionRetentionInterval.
func (c *Cluster) ExecutionRetention(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.execRetention = d
}

// Offsets are the clock offsets of the binaries started, in start order.
func (c *Cluster) Offsets() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.offsets)
}

func (c *Cluster) dbURL(appName string) (string, error) {
	u, err := url.Parse(c.url)
	if err != nil {
		return "", fmt.Errorf("database url: %w", err)
	}
	q := u.Query()
	q.Set("application_name", appName)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Start starts a new scheduler or worker and returns its id.
func (c *Cluster) Start(scheduler bool) (string, error) {
	c.mu.Lock()
	c.seq++
	kind, bin := "work", c.bins.Worker
	if scheduler {
		kind, bin = "sched", c.bins.Scheduler
	}
	id := fmt.Sprintf("%s-%s%d", c.tag, kind, c.seq)
	var offset time.Duration
	if c.skew > 0 {
		offset = (time.Duration(c.rng.Int64N(int64(c.skew))) - c.skew/2).Round(time.Millisecond)
	}
	c.offsets = append(c.offsets, offset)
	c.mu.Unlock()
	u, err := c.dbURL(id)
	if err != nil {
		return "", err
	}
	args := slices.Concat([]string{"--database-url", u, "--schema", c.schema, "--id", id}, binaryFlags(scheduler))
	if scheduler && c.outboxRetention > 0 {
		args = append(args, "--outbox-retention", c.outboxRetention.String(), "--outbox-retention-interval", outboxRetentionInterval.String())
	}
	if scheduler && c.execRetention > 0 {
		args = append(args, "--execution-retention", c.execRetention.String(), "--execution-retention-interval", executionRetentionInterval.String())
	}
	var env []string
	if offset != 0 {
		env = []string{"FF_CLOCK_OFFSET=" + offset.String()}
	}
	p, err := testproc.StartEnv(id, bin, env, args...)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.procs[id] = &member{id: id, scheduler: scheduler, proc: p}
	c.mu.Unlock()
	return id, nil
}

// Running returns the ids of the members still running, schedulers or
// workers.
func (c *Cluster) Running(scheduler bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, m := range c.procs {
		if m.scheduler == scheduler && !m.proc.Exited() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Kill kills a member with SIGKILL and waits until it is gone.
func (c *Cluster) Kill(id string) {
	c.mu.Lock()
	m := c.procs[id]
	if m != nil {
		m.killed = true
	}
	c.mu.Unlock()
	if m != nil {
		m.proc.Kill()
	}
}

// Leader returns River's current leader id ("" when there is none).
func Leader(ctx context.Context, pool *pgxpool.Pool) string {
	var id string
	if err := pool.QueryRow(ctx, `SELECT leader_id FROM river_leader WHERE expires_at > now()`).Scan(&id); err != nil {
		return ""
	}
	return id
}

// Restore restarts members that died unasked (noting them) so that at
// least one scheduler and one worker run.
func (c *Cluster) Restore() error {
	c.mu.Lock()
	var died []*member
	for id, m := range c.procs {
		if m.proc.Exited() && !m.killed {
			c.notes = append(c.notes, fmt.Sprintf("%s exited on its own (code %d):\n%s", id, m.proc.Code(), tail(m.proc.Output(), 2000)))
			m.killed = true
			died = append(died, m)
		}
	}
	c.mu.Unlock()
	for _, m := range died {
		if _, err := c.Start(m.scheduler); err != nil {
			return err
		}
	}
	for _, scheduler := range []bool{true, false} {
		if len(c.Running(scheduler)) == 0 {
			if _, err := c.Start(scheduler); err != nil {
				return err
			}
		}
	}
	return nil
}

// Notes are the members that exited on their own.
func (c *Cluster) Notes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.notes)
}

// Stop stops every member gracefully (SIGTERM), killing those that do not
// stop within within.
func (c *Cluster) Stop(within time.Duration) {
	c.mu.Lock()
	ms := make([]*member, 0, len(c.procs))
	for _, m := range c.procs {
		ms = append(ms, m)
	}
	c.mu.Unlock()
	for _, m := range ms {
		if !m.proc.Exited() {
			_ = m.proc.Signal(syscall.SIGTERM)
		}
	}
	for _, m := range ms {
		if _, ok := m.proc.Wait(within); !ok {
			m.proc.Kill()
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

package pgcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Replication is a primary and a streaming standby of it, started from the
// installed PostgreSQL binaries (pg_basebackup -R), and the multi-host URL
// that reaches whichever of the two is writable.
type Replication struct {
	t testing.TB
	// Primary takes the writes; Standby streams from it. Failover swaps
	// them (the old primary is then stopped until Rebuild).
	Primary, Standby *Cluster
	// URL lists both servers with target_session_attrs=read-write: what
	// the binaries and the application are given. It stays valid across
	// Failover and Rebuild (their ports do not change).
	URL   string
	sync  bool
	extra string
}

// NewReplication starts a primary and a standby streaming from it; with
// sync the primary waits for the standby at every commit
// (synchronous_standby_names = '*'). extra goes into both servers'
// postgresql.conf (NewWith). Without pg_basebackup the test is skipped
// (failed with CI=true).
func NewReplication(ctx context.Context, t testing.TB, sync bool, extra string) *Replication {
	t.Helper()
	r := &Replication{t: t, Primary: NewWith(ctx, t, extra), sync: sync, extra: extra}
	if _, err := r.Primary.Run(ctx, "pg_basebackup", "--version"); err != nil {
		SkipOrFail(t, "pg_basebackup is not installed beside "+filepath.Join(r.Primary.Bin, "postgres"))
	}
	r.Standby = NewDir(t)
	if err := r.follow(ctx); err != nil {
		t.Fatal(err)
	}
	r.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		r.Primary.Port, r.Standby.Port)
	return r
}

// follow makes r.Standby (a cluster folder without data) a standby of
// r.Primary and waits until it streams, synchronously when r.sync.
func (r *Replication) follow(ctx context.Context) error {
	if out, err := r.Standby.Run(ctx, "pg_basebackup", "-D", r.Standby.Data(), "-R", "-X", "stream", "-c", "fast",
		"-h", r.Primary.Host, "-p", fmt.Sprint(r.Primary.Port), "-U", "postgres"); err != nil {
		return fmt.Errorf("pg_basebackup: %w\n%s\nprimary's log:\n%s", err, out, r.Primary.Log())
	}
	// The copy brings the primary's settings (its port among them): the
	// standby's own come after, and promoted it has no standby of its own
	// to wait for until one follows it.
	if err := r.Standby.configure(r.extra + "\nsynchronous_standby_names = ''\n"); err != nil {
		return err
	}
	if err := r.Standby.start(ctx); err != nil {
		return err
	}
	admin, err := pgxpool.New(ctx, r.Primary.ConnString("postgres")+" pool_max_conns=1")
	if err != nil {
		return err
	}
	defer admin.Close()
	if r.sync {
		for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
			if _, err := admin.Exec(ctx, q); err != nil {
				return fmt.Errorf("making the standby synchronous: %w", err)
			}
		}
	}
	want := "async"
	if r.sync {
		want = "sync"
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state string
		err := admin.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&state)
		if err == nil && state == want {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the standby is not streaming %s after 30 s (%q, %v)\nstandby's log:\n%s", want, state, err, r.Standby.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pool returns a pool through the multi-host URL whose search_path is
// schema, closed when the test ends.
func (r *Replication) Pool(ctx context.Context, schema string, maxConns int32) *pgxpool.Pool {
	r.t.Helper()
	cfg, err := pgxpool.ParseConfig(r.URL)
	if err != nil {
		r.t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(p.Close)
	return p
}

// Failover kills the primary (pg_ctl stop -m immediate) and promotes the
// standby, returning how long the promotion took. The promoted standby is
// Primary from then on; the old primary, stopped, is Standby until
// Rebuild. Safe to call from any goroutine (not beside Rebuild).
func (r *Replication) Failover(ctx context.Context) (time.Duration, error) {
	if out, err := r.Primary.Run(ctx, "pg_ctl", "-D", r.Primary.Data(), "-m", "immediate", "-w", "-t", "30", "stop"); err != nil {
		return 0, fmt.Errorf("pg_ctl stop -m immediate: %w\n%s", err, out)
	}
	began := time.Now()
	if out, err := r.Standby.Run(ctx, "pg_ctl", "-D", r.Standby.Data(), "-w", "-t", "30", "promote"); err != nil {
		return 0, fmt.Errorf("pg_ctl promote: %w\n%s\nstandby's log:\n%s", err, out, r.Standby.Log())
	}
	r.Primary, r.Standby = r.Standby, r.Primary
	return time.Since(began), nil
}

// Rebuild makes the old primary, stopped by Failover, a standby of the new
// one (its data removed, a new pg_basebackup, on its own port), so that the
// next Failover has a standby to promote. Safe to call from any goroutine
// (not beside Failover).
func (r *Replication) Rebuild(ctx context.Context) error {
	if err := os.RemoveAll(r.Standby.Data()); err != nil {
		return err
	}
	return r.follow(ctx)
}

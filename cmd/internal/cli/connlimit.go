package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The server refuses a connection with SQLSTATE 53300 (too_many_connections)
// when max_connections is reached ("remaining connection slots are
// reserved…") or when the role's own CONNECTION LIMIT is. Neither message
// names a setting or a pool size; these say which limit it was, who holds
// the connections (by application name, which every ffriver binary sets) and
// which flag sizes this process's own pool.

// connLimitCode is SQLSTATE too_many_connections.
const connLimitCode = "53300"

// isConnLimit reports whether err is the server refusing a connection for
// want of a slot.
func isConnLimit(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == connLimitCode
}

// ConnLimitError is returned by OpenPool when the server refused its first
// connection for want of a slot. It says which limit and what to change.
type ConnLimitError struct {
	// App is this process's application_name; MaxConns its pool's size and
	// SizeFlags the flags that set it.
	App       string
	MaxConns  int32
	SizeFlags string
	// Role is true when the role's CONNECTION LIMIT was reached, false for
	// the server's max_connections.
	Role bool
	Err  error
}

// Error implements error.
func (e *ConnLimitError) Error() string {
	limit := "the server's max_connections is reached (the remaining slots are reserved for superusers)"
	raise := "raise max_connections"
	if e.Role {
		limit = "the role's CONNECTION LIMIT is reached"
		raise = "raise the role's limit (ALTER ROLE … CONNECTION LIMIT)"
	}
	return fmt.Sprintf("the server refused a connection: %s. %s's pool takes up to %d connections; lower %s, "+
		"or %s; ffctl status lists who holds connections by application name (docs/operating.md: Connections and pool sizing)",
		limit, e.App, e.MaxConns, e.SizeFlags, raise)
}

// Unwrap returns the server's error.
func (e *ConnLimitError) Unwrap() error { return e.Err }

func connLimitError(o PoolOptions, maxConns int32, err error) *ConnLimitError {
	flags := o.SizeFlags
	if flags == "" {
		flags = "pool_max_conns in --database-url"
	} else {
		flags += " (or set pool_max_conns in --database-url)"
	}
	app := o.AppName
	if app == "" {
		app = "this process"
	}
	return &ConnLimitError{App: app, MaxConns: maxConns, SizeFlags: flags, Role: strings.Contains(err.Error(), "for role"), Err: err}
}

// ExplainConnLimit returns err, or, when err is (or wraps) the server's
// refusal of a connection for lack of slots, a *ConnLimitError that says
// so, names the pool of o (maxConns connections) and what to change: for
// the errors of a connection a command's pool opens after its first one (a
// stream's own, a second query's), which OpenPool's wait does not see.
func ExplainConnLimit(err error, o PoolOptions, maxConns int32) error {
	if err == nil || !isConnLimit(err) {
		return err
	}
	var explained *ConnLimitError
	if errors.As(err, &explained) {
		return err
	}
	return connLimitError(o, maxConns, err)
}

// ConnLimitReportInterval is the least time between two explanations of a
// refused connection in a running process.
const ConnLimitReportInterval = time.Minute

// connLimitTracer watches the pool's acquires: when one fails because the
// server refused a new connection for want of a slot, it logs, at most once
// per ConnLimitReportInterval, which limit it is, how many connections the
// server (or role) allows, who holds them by application name, and which
// flag sizes this pool, read on one of the pool's own connections.
type connLimitTracer struct {
	logger *slog.Logger
	opts   PoolOptions
	max    int32
	// starting is set while OpenPool waits for the first connection, whose
	// refusals it explains itself.
	starting atomic.Bool

	mu   sync.Mutex
	last time.Time
}

// TraceQueryStart implements pgx.QueryTracer (ConnConfig.Tracer must be
// one); queries are not traced.
func (t *connLimitTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *connLimitTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceAcquireStart implements pgxpool.AcquireTracer.
func (t *connLimitTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}

// TraceAcquireEnd implements pgxpool.AcquireTracer.
func (t *connLimitTracer) TraceAcquireEnd(_ context.Context, pool *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	if data.Err == nil || !isConnLimit(data.Err) || t.starting.Load() {
		return
	}
	t.mu.Lock()
	if !t.last.IsZero() && time.Since(t.last) < ConnLimitReportInterval {
		t.mu.Unlock()
		return
	}
	t.last = time.Now()
	t.mu.Unlock()
	go t.explain(pool, data.Err)
}

// explain logs the refusal with the server's figures.
func (t *connLimitTracer) explain(pool *pgxpool.Pool, refused error) {
	e := connLimitError(t.opts, t.max, refused)
	attrs := []any{"error", refused.Error(), "pool_max_conns", t.max, "next_report_in", ConnLimitReportInterval.String()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The lookup needs a connection: when the limit refused the pool a new
	// one, wait for one of its own to be free again (up to 10 s).
	holders, allowed, err := connHolders(ctx, pool, e.Role)
	for err != nil && isConnLimit(err) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
			holders, allowed, err = connHolders(ctx, pool, e.Role)
		}
	}
	if err != nil {
		attrs = append(attrs, "holders", "unknown: "+err.Error())
	} else {
		attrs = append(attrs, "allowed", allowed, "holders", holders)
	}
	t.logger.Warn("ffriver: "+e.Error(), attrs...)
}

// connHolders reads, on a connection of pool, how many connections the
// limit allows and who holds them (application name: count), the
// connections of this role only when role is set.
func connHolders(ctx context.Context, pool *pgxpool.Pool, role bool) (holders string, allowed int, err error) {
	q := `SELECT current_setting('max_connections')::int,
		COALESCE(string_agg(app || ': ' || n, ', ' ORDER BY n DESC, app), '') FROM (
		SELECT COALESCE(NULLIF(application_name, ''), '(none)') AS app, count(*) AS n
		FROM pg_stat_activity WHERE backend_type = 'client backend' GROUP BY 1) s`
	if role {
		q = `SELECT (SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user),
		COALESCE(string_agg(app || ': ' || n, ', ' ORDER BY n DESC, app), '') FROM (
		SELECT COALESCE(NULLIF(application_name, ''), '(none)') AS app, count(*) AS n
		FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename = current_user GROUP BY 1) s`
	}
	err = pool.QueryRow(ctx, q).Scan(&allowed, &holders)
	return holders, allowed, err
}

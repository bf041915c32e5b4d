package cli_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testlog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A refused connection (SQLSTATE 53300) is explained: which limit, the
// pool's size and the flags that set it; in a running process, at most once
// a minute, with how many connections the limit allows and who holds them.
// The limit here is a role's CONNECTION LIMIT, a role of the test's own, so
// the shared server's max_connections is never exhausted.
func TestConnectionLimitIsExplained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testdb.Connect(t, "")
	var buf [4]byte
	_, _ = rand.Read(buf[:])
	role := "ff_connlimit_" + hex.EncodeToString(buf[:])
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN CONNECTION LIMIT 1`); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("creating a role with a connection limit: %v", err)
		}
		t.Skipf("cannot create a role here: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
		for range 50 {
			if _, err := admin.Exec(ctx, `DROP ROLE IF EXISTS `+role); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	roleURL := u.String()

	// Its one connection is held elsewhere: the pool's first is refused.
	other, err := pgx.Connect(ctx, roleURL+"&application_name=the-other-process")
	if err != nil {
		t.Fatalf("connecting as %s: %v", role, err)
	}
	c := &cli.Common{DatabaseURL: roleURL}
	opts := cli.PoolOptions{AppName: "ffworker", MaxConns: 22, SizeFlags: "--concurrency and --scan-concurrency"}
	_, err = c.OpenPool(ctx, opts)
	var cle *cli.ConnLimitError
	if !errors.As(err, &cle) || !cle.Role {
		t.Fatalf("OpenPool with the role's slot taken: %v; want a *cli.ConnLimitError about the role's limit", err)
	}
	for _, want := range []string{"CONNECTION LIMIT", "ffworker's pool takes up to 22 connections", "--concurrency and --scan-concurrency"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if code := cli.ExitCode(err); code != cli.ExitFailure {
		t.Errorf("exit code %d, want %d", code, cli.ExitFailure)
	}
	other.Close(ctx)
	// The server lets the other process's backend go after the close
	// returns: until it has, the role's slot is still taken.
	fftest.Await(t, 30*time.Second, "the other process's connection gone", func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, role).Scan(&n)
		return err == nil && n == 0
	})

	// Running: the pool holds the one slot; its next connection is
	// refused, and the log says who holds what.
	var logs testlog.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	opts.AppName = "ffworker-under-test"
	pool, err := c.OpenPool(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = pool.Acquire(actx)
	cancel()
	if err == nil {
		t.Fatal("a second connection of a role limited to one was granted")
	}
	held.Release()
	fftest.Await(t, 30*time.Second, "the refusal explained in the log", func() bool {
		return strings.Contains(logs.String(), "holders=")
	})
	line := logs.String()
	for _, want := range []string{"CONNECTION LIMIT", "allowed=1", "ffworker-under-test: 1", "pool_max_conns=22"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q does not say %q", line, want)
		}
	}
}

// A refusal for lack of slots on a connection a command opens after its
// first one (ffctl tail --consumer's stream) is explained as OpenPool
// explains the first; other errors, and ones already explained, pass as
// they are.
func TestExplainConnLimit(t *testing.T) {
	o := cli.PoolOptions{AppName: "ffctl tail", MaxConns: 2}
	refused := fmt.Errorf("subscribe: connecting: %w", &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"})
	err := cli.ExplainConnLimit(refused, o, 2)
	var cl *cli.ConnLimitError
	if !errors.As(err, &cl) || !strings.Contains(err.Error(), "max_connections") || !strings.Contains(err.Error(), "ffctl tail's pool takes up to 2") {
		t.Errorf("cli.ExplainConnLimit(53300) = %v, want the connection-limit sentence naming ffctl tail's pool", err)
	}
	if !errors.Is(err, refused) && !strings.Contains(errors.Unwrap(err).Error(), "too many clients") {
		t.Errorf("the explanation lost the server's error: %v", err)
	}
	if again := cli.ExplainConnLimit(err, o, 2); again != err {
		t.Errorf("an explained error was explained again: %v", again)
	}
	other := errors.New("subscribe: schema x has no ffriver tables")
	if got := cli.ExplainConnLimit(other, o, 2); got != other {
		t.Errorf("cli.ExplainConnLimit(%v) = %v, want it unchanged", other, got)
	}
	if cli.ExplainConnLimit(nil, o, 2) != nil {
		t.Error("cli.ExplainConnLimit(nil) is not nil")
	}
}

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/subscribe"
)

// What a newcomer's mistakes get: a malformed cursor says what a cursor is
// and what to do instead, tail on an unmigrated schema says to migrate it,
// and a consumer name in use says to stop the other stream or choose
// another name.
func TestNewcomerMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tail := func(args ...string) (int, string) {
		var stderr bytes.Buffer
		code := runTail(ctx, append(args, "--idle-exit", "1s"), &bytes.Buffer{}, &stderr)
		return code, stderr.String()
	}
	db := testdb.New(t, nil)
	for _, cur := range []string{"de", "04ffffffffffffffffffff", "zz"} {
		code, msg := tail("--database-url", testdb.URL(), "--schema", db.Schema, "--cursor", cur)
		if code != cli.ExitUsage || !strings.Contains(msg, "a cursor is the hex position") || !strings.Contains(msg, "--from-start") {
			t.Errorf("--cursor %s: exit %d, %q; want a usage error saying what a cursor is and what to do", cur, code, msg)
		}
	}

	// The beginning of an id, copied from a table, points to exec list.
	var stderr bytes.Buffer
	if code := runExec(ctx, []string{"get", "5f0c0e6c", "--database-url", "postgres://u@127.0.0.1:1/db"}, &bytes.Buffer{}, &stderr); code != cli.ExitUsage ||
		!strings.Contains(stderr.String(), "ffctl exec list --id 5f0c0e6c") {
		t.Errorf("exec get of a short id: exit %d, %q; want a pointer to exec list --id", code, stderr.String())
	}

	bare := testdb.New(t, &testdb.Options{NoMigrate: true})
	if code, msg := tail("--database-url", testdb.URL(), "--schema", bare.Schema); code != cli.ExitNotMigrated || !strings.Contains(msg, "ffctl migrate --schema "+bare.Schema) {
		t.Errorf("tail on an unmigrated schema: exit %d, %q; want %d and the ffctl migrate hint", code, msg, cli.ExitNotMigrated)
	}

	s, err := subscribe.Leases(ctx, db.Pool, subscribe.Options{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if code, msg := tail("--database-url", testdb.URL(), "--schema", db.Schema, "--consumer", "billing"); code == 0 ||
		!strings.Contains(msg, "stop that one, or choose another name") {
		t.Errorf("tail --consumer of a name in use: exit %d, %q; want it to say to stop the other or choose another name", code, msg)
	}
}

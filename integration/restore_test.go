package integration

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/pgcluster"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
)

// A schema dumped from one server and restored on another (a throwaway
// cluster, whose transaction ids are far behind): a cursor from the first
// server fails at subscribe time saying it comes from elsewhere, and a
// stream from the start on the copy delivers every restored event.
func TestRestoredSchemaOnAnotherServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c := pgcluster.New(ctx, t)

	src := testdb.New(t, nil)
	var want []int64
	for range 5 {
		var id int64
		if err := src.Pool.QueryRow(ctx, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
			VALUES ($1, 'acquired', 1, 0) RETURNING event_id`, uuid.NewString()).Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	s, err := subscribe.Leases(ctx, src.Pool, subscribe.Options{Schema: src.Schema, Start: subscribe.StartBeginning})
	if err != nil {
		t.Fatal(err)
	}
	var last subscribe.LeaseEvent
	for range want {
		if last, err = s.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	// pg_dump of the schema from the test server, restored with psql.
	dump := filepath.Join(t.TempDir(), "schema.sql")
	out, err := exec.CommandContext(ctx, filepath.Join(c.Bin, "pg_dump"), "--no-owner", "--no-privileges",
		"-n", src.Schema, "-f", dump, testdb.URL()).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	dst := c.Pool(ctx, src.Schema, 4)
	if out, err := exec.CommandContext(ctx, filepath.Join(c.Bin, "psql"), "-v", "ON_ERROR_STOP=1", "-q", "-f", dump,
		c.ConnString("postgres")).CombinedOutput(); err != nil {
		t.Fatalf("psql restore: %v\n%s", err, out)
	}
	var here int64
	if err := dst.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&here); err != nil {
		t.Fatal(err)
	}
	if last.Cursor.Xact < here {
		t.Fatalf("the test server's transaction ids (%d) are not ahead of the new cluster's (%d)", last.Cursor.Xact, here)
	}

	_, err = subscribe.Leases(ctx, dst, subscribe.Options{Schema: src.Schema, Start: subscribe.StartAfter, After: last.Cursor})
	var fe *subscribe.ForeignCursorError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "another server or a restored copy") {
		t.Fatalf("a cursor from the first server: %v, want a *ForeignCursorError", err)
	}

	all, err := subscribe.Leases(ctx, dst, subscribe.Options{Schema: src.Schema, Start: subscribe.StartBeginning})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	var got []int64
	for range want {
		ev, err := all.Next(ctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(got), err)
		}
		got = append(got, ev.EventID)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the copy delivered %v, want %v", got, want)
	}
}

package subscribe_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
)

// These tests lose stream ticks by deleting them, which is what a failover
// to a standby that had not received them does (the scenario with a real
// promoted standby is integration/failover_test.go). The server's timeline
// does not change here, so the refusal reads "lost in a crash, or from
// another server"; the rules are the same.

// toTick returns the stream tick of c's batch's newer snapshot.
func toTick(t *testing.T, c subscribe.Cursor) int64 {
	t.Helper()
	b, ok := c.BatchOf()
	if !ok {
		t.Fatalf("cursor %#v has no batch", c)
	}
	_, to := b.Snapshots()
	return to.Tick
}

// A position whose tick this server does not hold is refused with a
// *PositionAheadError naming a position it does hold; resuming from that one
// delivers the events after it. A position whose tick was pruned, but
// older than a tick of its timeline that is here, is accepted.
func TestPositionNotHeldIsRefused(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	sql := &fftest.DB{TB: t, Pool: db.Pool}
	ctx := context.Background()
	var timeline int64
	if err := db.Pool.QueryRow(ctx, `SELECT ff_wal_timeline()`).Scan(&timeline); err != nil {
		t.Fatal(err)
	}

	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	var cur []subscribe.Cursor
	var ids []int64
	for range 3 {
		ids = append(ids, insertLease(t, db.Pool, row{}))
		ev := next(t, s, 10*time.Second)
		if ev.EventID != ids[len(ids)-1] {
			t.Fatalf("got event %d, want %d", ev.EventID, ids[len(ids)-1])
		}
		cur = append(cur, ev.Cursor)
	}
	s.Close()
	for i, c := range cur {
		if tl := toTick(t, c) >> 40; tl != timeline {
			t.Fatalf("cursor %d: its tick %d records timeline %d, want the server's %d", i, toTick(t, c), tl, timeline)
		}
	}
	t1, t3 := toTick(t, cur[0]), toTick(t, cur[2])
	if !(t1 < t3) {
		t.Fatalf("the first and last events share tick %d: the test needs them in different batches", t1)
	}

	// Pruned: the first event's tick is gone, later ticks of its timeline
	// are here.
	sql.Exec(`DELETE FROM ff_stream_tick WHERE tick_id = $1`, t1)
	s, err = subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: cur[0]}))
	if err != nil {
		t.Fatalf("resuming after a position whose tick was pruned: %v", err)
	}
	if got := eventIDs([]subscribe.LeaseEvent{next(t, s, 10*time.Second), next(t, s, 10*time.Second)}); got[0] != ids[1] || got[1] != ids[2] {
		t.Fatalf("after a pruned position: events %v, want %v", got, ids[1:])
	}
	s.Close()

	// Lost: the ticks from the last event's on are gone, and other
	// transactions commit (the next tick may take a lost tick's id).
	sql.Exec(`DELETE FROM ff_stream_tick WHERE tick_id >= $1`, t3)
	later := insertLease(t, db.Pool, row{})
	_, err = subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: cur[2]}))
	var pe *subscribe.PositionAheadError
	if !errors.As(err, &pe) || !errors.Is(err, ff.ErrPositionAhead) {
		t.Fatalf("resuming after a position whose tick is lost: %v, want a *PositionAheadError", err)
	}
	if pe.Cursor != cur[2] || pe.Timeline != timeline || pe.ServerTimeline != timeline || pe.Resume.IsZero() {
		t.Fatalf("PositionAheadError %+v: want cursor %s, timelines %d, and a position to resume from", pe, cur[2], timeline)
	}
	if tk := toTick(t, pe.Resume); tk >= t3 || tk>>40 != timeline {
		t.Fatalf("Resume's tick %d: want one of timeline %d before the lost %d", tk, timeline, t3)
	}
	for _, want := range []string{"beyond this server's history", "ffctl tail --stream leases --cursor " + pe.Resume.String(), "delivers again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}

	// Resuming from the position it names delivers, at least, every event
	// committed after it, in order, each once.
	s, err = subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: pe.Resume}))
	if err != nil {
		t.Fatalf("resuming from the position the error names: %v", err)
	}
	defer s.Close()
	seen := map[int64]int{}
	for seen[later] == 0 {
		seen[next(t, s, 10*time.Second).EventID]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %d delivered %d times", id, n)
		}
	}
}

// A running stream whose position the server no longer holds when it
// reconnects ends with a *PositionAheadError instead of reading on; one
// that had only read batches without events for it past its last event
// reads again after that event, losing and repeating nothing.
func TestReconnectChecksThePosition(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	sql := &fftest.DB{TB: t, Pool: db.Pool}
	ctx := context.Background()

	// Polling hourly, a stream reads only at start and when notified. It
	// reads namespace ns, whose first event it delivers before open returns.
	open := func(t *testing.T, app, ns string) *subscribe.Stream[subscribe.LeaseEvent] {
		first := insertLease(t, db.Pool, row{namespace: str(ns)})
		s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning,
			Filter: ff.Filter{Namespace: ns}, PollInterval: time.Hour, ApplicationName: app}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		if ev := next(t, s, 10*time.Second); ev.EventID != first {
			t.Fatalf("got event %d, want %d", ev.EventID, first)
		}
		return s
	}

	t.Run("read past its last event", func(t *testing.T) {
		app := appName(t)
		s := open(t, app, "a")
		// Another namespace's event moves the stream on without a delivery.
		insertLease(t, db.Pool, row{namespace: str("other")})
		var before int64
		if err := db.Pool.QueryRow(ctx, `SELECT max(tick_id) FROM ff_stream_tick`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		sql.Exec(`SELECT pg_notify($1, '')`, outbox.Channel(db.Schema))
		for deadline := time.Now().Add(10 * time.Second); sql.Count(`SELECT count(*) FROM ff_stream_tick WHERE tick_id > $1`, before) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the notified stream took no tick within 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		sql.Exec(`DELETE FROM ff_stream_tick WHERE tick_id > $1`, before)
		want := insertLease(t, db.Pool, row{namespace: str("a")})
		if n := terminate(t, db.Pool, app, "true"); n == 0 {
			t.Fatal("no connection of the stream to end")
		}
		var got []int64
		for len(got) == 0 || got[len(got)-1] != want {
			nctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			ev, err := s.Next(nctx)
			cancel()
			var disc *subscribe.DisconnectedError
			switch {
			case errors.As(err, &disc):
				continue
			case err != nil:
				t.Fatalf("after %v: %v", got, err)
			}
			got = append(got, ev.EventID)
		}
		if len(got) != 1 {
			t.Fatalf("after the reconnect: events %v, want only %d", got, want)
		}
	})

	t.Run("its last event lost", func(t *testing.T) {
		app := appName(t)
		s := open(t, app, "b")
		// The ticks from the one the stream delivered its event at are
		// lost; other transactions commit meanwhile.
		sql.Exec(`DELETE FROM ff_stream_tick`)
		insertLease(t, db.Pool, row{namespace: str("b")})
		if n := terminate(t, db.Pool, app, "true"); n == 0 {
			t.Fatal("no connection of the stream to end")
		}
		nctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		_, err := s.Next(nctx)
		var disc *subscribe.DisconnectedError
		if !errors.As(err, &disc) {
			t.Fatalf("first Next after the lost connection: %v, want a *DisconnectedError", err)
		}
		_, err = s.Next(nctx)
		var pe *subscribe.PositionAheadError
		if !errors.As(err, &pe) || !errors.Is(err, ff.ErrPositionAhead) {
			t.Fatalf("Next after reconnecting: %v, want a *PositionAheadError", err)
		}
		if _, again := s.Next(nctx); !errors.Is(again, ff.ErrPositionAhead) {
			t.Fatalf("Next after the refusal: %v, want the same terminal error", again)
		}
	})
}

package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testlog"
)

// ffctl tail --metrics-addr serves the stream's metrics by value, and
// /readyz once the stream is open.
func TestTailMetrics(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	for range 3 {
		if _, err := db.Pool.Exec(t.Context(), `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
			VALUES (gen_random_uuid()::text, 'acquired', (extract(epoch FROM now()) * 1000)::bigint - 5000, 0)`); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	var stderr testlog.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runTail(ctx, []string{"--from-start", "--metrics-addr", "127.0.0.1:0", "--database-url", testdb.URL(), "--schema", db.Schema},
			&testlog.Buffer{}, &stderr)
	}()
	var addr string
	addrRE := regexp.MustCompile(`metrics_addr=(\S+)`)
	fftest.Await(t, 20*time.Second, "tail serving metrics", func() bool {
		if m := addrRE.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		return false
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	events := regexp.MustCompile(`(?m)^ffriver_stream_events_total\{[^}]*stream="leases"[^}]*\} 3$`)
	fftest.Await(t, 20*time.Second, "3 lease events counted", func() bool {
		_, body := get("/metrics")
		return events.MatchString(body)
	})
	_, body := get("/metrics")
	if !regexp.MustCompile(`(?m)^ffriver_stream_lag_seconds_count\{[^}]*stream="leases"[^}]*\} 3$`).MatchString(body) {
		t.Errorf("no lag count of 3:\n%s", body)
	}
	// The events occurred 5 s before they were delivered: none in the
	// buckets below 5 s.
	if !regexp.MustCompile(`(?m)^ffriver_stream_lag_seconds_bucket\{[^}]*le="2.5"[^}]*\} 0$`).MatchString(body) {
		t.Errorf("lag below 2.5 s recorded for events 5 s old:\n%s", body)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d %s", code, body)
	}
	cancel()
	if code := <-done; code != cli.ExitOK && code != cli.ExitFailure {
		t.Errorf("tail exit %d", code)
	}
}

package integration

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
)

// TestSchedulerServesTheLiveStreams: the built ffscheduler serves the
// execution view's live page; its lease stream delivers a lease taken
// through the store, its backlog names the scanners, and SIGTERM with a
// stream open stops the scheduler at once, ending the stream, rather than
// waiting for the stream to end.
func TestSchedulerServesTheLiveStreams(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.SchedulerConns+2) // the scheduler's pool and its live page's stream: no ffworker (docs/development.md)
	schedBin, _ := buildPipelineBinaries(t)
	db := testdb.New(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	sched := startProc(t, "ffscheduler", schedBin, append(dbArgs(db), "--ui-addr", addr)...)
	base := "http://" + addr + "/ff/live"
	fftest.Await(t, 20*time.Second, "the live page at "+base, func() bool {
		resp, err := http.Get(base)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	resp, err := http.Get(base + "/backlog")
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), `"available":true`) || !strings.Contains(body.String(), `"name":"attempt_timeout"`) {
		t.Fatalf("GET /ff/live/backlog: %d %s, want every scanner's backlog", resp.StatusCode, body.String())
	}

	stream, err := http.Get(base + "/leases")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	events := make(chan string, 64)
	var streamEnded time.Time // written before events closes
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
			events <- sc.Text()
		}
		streamEnded = time.Now()
	}()
	await := func(what string, match func(string) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case line, ok := <-events:
				if !ok {
					t.Fatalf("the stream ended before %s", what)
				}
				if match(line) {
					return
				}
			case <-deadline:
				t.Fatalf("no %s within 20 s", what)
			}
		}
	}
	await("ready message", func(l string) bool { return l == "event: ready" })

	st, err := executions.Open(t.Context(), db.Pool, executions.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.Create(t.Context(), executions.CreateParams{Lane: "live"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(t.Context(), executions.ClaimParams{Lane: "live", WorkerInstanceID: "w", LeaseTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	await("lease event of "+id.String(), func(l string) bool {
		return strings.HasPrefix(l, "data: ") && strings.Contains(l, `"execution_id":"`+id.String()+`"`)
	})

	start := time.Now()
	if code := sched.signal(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("ffscheduler exit %d on SIGTERM with a live stream open\n%s", code, sched.Output())
	}
	t.Logf("ffscheduler stopped %s after SIGTERM", time.Since(start))
	for range events { // the stream ends with the server
	}
	// The stream ends when the UI server stops, the first thing a stop
	// does; a server that waited for the stream would end it only after
	// its 5 s shutdown timeout. (The whole stop, River's included, takes
	// what a busy machine makes of it: not measured here.)
	if d := streamEnded.Sub(start); d > 4*time.Second {
		t.Errorf("the live stream ended %s after SIGTERM: the scheduler waited for the stream", d)
	}
}

package integration

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
)

// TestMetricsAndReadiness runs ffscheduler and ffworker with --metrics-addr
// against a small workload and reads their /metrics by value: the
// scheduler's ticks report the backlog while no worker applies it, the
// worker counts every item once it does, and the backlog drains to 0.
// Their database goes away (a proxy between them and Postgres closes every
// connection and refuses new ones): /readyz fails while /healthz stays ok,
// and /readyz comes back when the database does.
func TestMetricsAndReadiness(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.BinariesConns+2) // its binaries and a stream (docs/development.md)
	db := testdb.New(t, nil)
	sql := &fftest.DB{TB: t, Ctx: t.Context(), Pool: db.Pool}
	schedBin, workerBin := buildPipelineBinaries(t)
	proxy := startProxy(t, testdb.URL())

	const n = 40
	sql.Exec(`WITH ids AS (SELECT (i % 256)::smallint AS p, gen_random_uuid() AS id FROM generate_series(1, $1) i),
		core AS (INSERT INTO ff_exec_core (partition_key, execution_id, lane_id,
			lifecycle_phase, ownership_state, eligibility_state, public_state, attempt_state)
			SELECT p, id, 'metrics', 'active', 'leased', 'not_applicable', 'active', 'running_attempt' FROM ids)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms)
		SELECT p, id, 0, (extract(epoch FROM now()) * 1000)::bigint - 60000 FROM ids`, n)

	args := []string{"--database-url", proxy.url, "--schema", db.Schema, "--metrics-addr", "127.0.0.1:0"}
	// The scheduler works ticks and scans only (no apply workers): the
	// items it inserts wait, so every tick sees all n due.
	sched := startProc(t, "ffscheduler", schedBin, append(args, "--ui-addr", "off", "--attempt-timeout-interval", "200ms")...)
	schedAddr := awaitMetricsAddr(t, sched)

	fftest.Await(t, 30*time.Second, "the scheduler's ticks report the backlog", func() bool {
		m := scrape(t, schedAddr)
		return m.get(`ffriver_scanner_due{scanner="attempt_timeout"}`) == n
	})
	m := scrape(t, schedAddr)
	if age := m.get(`ffriver_scanner_oldest_due_seconds{scanner="attempt_timeout"}`); age < 60 || age > 600 {
		t.Errorf("oldest due %v s, want the seeded lease's age (60 s and a little)", age)
	}
	if v := m.get(`ffriver_scanner_due{scanner="delayed_promoter"}`); v != 0 {
		t.Errorf("delayed_promoter due %v, want 0", v)
	}
	if !m.has(`river_insert_count_total`) {
		t.Errorf("no River metrics (otelriver) on the scheduler:\n%s", m.raw)
	}

	// The worker applies them (and works no scans: the gauges stay the
	// scheduler's).
	worker := startProc(t, "ffworker", workerBin, append(args, "--scan-concurrency", "0")...)
	workerAddr := awaitMetricsAddr(t, worker)
	fftest.Await(t, 30*time.Second, "the worker counts every item", func() bool {
		return scrape(t, workerAddr).get(`ffriver_items_total{outcome="processed",scanner="attempt_timeout"}`) == n
	})
	awaitDB(sql, 10*time.Second, "expired executions", n, expiredByLane, "metrics")
	fftest.Await(t, 30*time.Second, "the backlog gauge drains", func() bool {
		m := scrape(t, schedAddr)
		return m.get(`ffriver_scanner_due{scanner="attempt_timeout"}`) == 0 &&
			m.get(`ffriver_scanner_oldest_due_seconds{scanner="attempt_timeout"}`) == 0
	})
	m = scrape(t, workerAddr)
	if c := m.get(`ffriver_item_duration_seconds_count{scanner="attempt_timeout"}`); c != n {
		t.Errorf("item duration count %v, want %d", c, n)
	}
	for _, o := range []string{"no_op", "orphaned", "skipped_locked", "failed"} {
		if v := m.get(`ffriver_items_total{outcome="` + o + `",scanner="attempt_timeout"}`); v != 0 {
			t.Errorf("%s items: %v, want none", o, v)
		}
	}
	if !m.has(`river_work_count_total`) {
		t.Errorf("no River work metrics (otelriver) on the worker")
	}
	if m.has(`ffriver_scanner_due`) {
		t.Errorf("the worker, which works no ticks, reports a backlog gauge")
	}

	// Readiness follows the database.
	for _, a := range []string{schedAddr, workerAddr} {
		if code, body := get(t, a, "/readyz"); code != http.StatusOK {
			t.Fatalf("%s /readyz: %d %s", a, code, body)
		}
	}
	proxy.down()
	for _, a := range []string{schedAddr, workerAddr} {
		var body string
		fftest.Await(t, 30*time.Second, a+" /readyz fails without the database", func() bool {
			var code int
			code, body = get(t, a, "/readyz")
			return code == http.StatusServiceUnavailable
		})
		if !strings.Contains(body, "database does not answer") {
			t.Errorf("%s /readyz while down: %q", a, body)
		}
		if code, _ := get(t, a, "/healthz"); code != http.StatusOK {
			t.Errorf("%s /healthz %d while the database is down, want 200 (the process is alive)", a, code)
		}
	}
	proxy.up()
	for _, a := range []string{schedAddr, workerAddr} {
		fftest.Await(t, 60*time.Second, a+" /readyz recovers with the database", func() bool {
			code, _ := get(t, a, "/readyz")
			return code == http.StatusOK
		})
	}

	if code := worker.signal(syscall.SIGTERM, 40*time.Second); code != 0 {
		t.Errorf("ffworker exit %d after SIGTERM", code)
	}
	if code := sched.signal(syscall.SIGTERM, 40*time.Second); code != 0 {
		t.Errorf("ffscheduler exit %d after SIGTERM", code)
	}
}

var metricsAddrRE = regexp.MustCompile(`metrics_addr=(\S+)`)

// awaitMetricsAddr waits for p's "serving metrics and health" line and
// returns the address.
func awaitMetricsAddr(t *testing.T, p *proc) string {
	t.Helper()
	var addr string
	fftest.Await(t, 30*time.Second, p.name+" serving metrics", func() bool {
		if m := metricsAddrRE.FindStringSubmatch(p.Output()); m != nil {
			addr = m[1]
			return true
		}
		return false
	})
	return addr
}

func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metrics is one Prometheus exposition, by series: the name and its labels
// in sorted order, the exporter's otel_scope_* labels left out.
type metrics struct {
	raw    string
	series map[string]float64
}

var seriesRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func scrape(t *testing.T, addr string) metrics {
	t.Helper()
	code, body := get(t, addr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	m := metrics{raw: body, series: map[string]float64{}}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		g := seriesRE.FindStringSubmatch(line)
		if g == nil {
			t.Fatalf("unparsable exposition line %q", line)
		}
		var labels []string
		for _, l := range labelRE.FindAllStringSubmatch(g[2], -1) {
			if !strings.HasPrefix(l[1], "otel_scope_") {
				labels = append(labels, l[1]+`="`+l[2]+`"`)
			}
		}
		slices.Sort(labels)
		v, err := strconv.ParseFloat(g[3], 64)
		if err != nil {
			t.Fatalf("value of %q: %v", line, err)
		}
		key := g[1]
		if len(labels) > 0 {
			key += "{" + strings.Join(labels, ",") + "}"
		}
		m.series[key] = v
	}
	return m
}

// get returns the value of one series (labels sorted by name), 0 when
// absent.
func (m metrics) get(series string) float64 { return m.series[series] }

// has reports whether any series of the metric name exists.
func (m metrics) has(name string) bool {
	for k := range m.series {
		if k == name || strings.HasPrefix(k, name+"{") {
			return true
		}
	}
	return false
}

// proxy forwards TCP connections to Postgres; down closes every connection
// and stops listening (the database "goes away" for the processes behind
// it), up listens again on the same address.
type proxy struct {
	t      *testing.T
	addr   string // 127.0.0.1:port
	target string
	url    string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func startProxy(t *testing.T, dbURL string) *proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		t.Skipf("the proxy needs a host in the database URL (%v)", err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	p := &proxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	pu := *u
	pu.Host = p.addr
	p.url = pu.String()
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
}

func (p *proxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	c.Close()
	s.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

func (p *proxy) up() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy: listening again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// TestMetricsBounded: an idle ffworker's /metrics already shows ffriver's
// item counter (docs/operating.md's `grep ^ffriver_` prints it before any work),
// and after items spread over every partition and five namespaces no
// metric of either binary has more series than a handful of label values
// explain: River's job tags (partition-<n>, ns-<namespace>) are no label.
func TestMetricsBounded(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.BinariesConns+2) // its binaries and a stream (docs/development.md)
	db := testdb.New(t, nil)
	sql := &fftest.DB{TB: t, Ctx: t.Context(), Pool: db.Pool}
	schedBin, workerBin := buildPipelineBinaries(t)
	args := append(dbArgs(db), "--metrics-addr", "127.0.0.1:0")

	worker := startProc(t, "ffworker", workerBin, append(args, "--scan-concurrency", "0")...)
	workerAddr := awaitMetricsAddr(t, worker)
	fftest.Await(t, 30*time.Second, "the idle worker's /readyz", func() bool {
		code, _ := get(t, workerAddr, "/readyz")
		return code == http.StatusOK
	})
	if m := scrape(t, workerAddr); m.get(`ffriver_items_total{outcome="processed",scanner="attempt_timeout"}`) != 0 ||
		!m.has(`ffriver_items_total`) {
		t.Errorf("an idle worker's /metrics has no ffriver_items_total (0) for attempt_timeout:\n%s", grepLines(m.raw, "ffriver_"))
	}

	// Five namespaces in each of the 256 partitions.
	const n = 5 * 256
	sql.Exec(`WITH ids AS (SELECT (i % 256)::smallint AS p, 'ns-' || (i / 256) AS ns, gen_random_uuid() AS id
			FROM generate_series(0, $1 - 1) i),
		core AS (INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, raw_fields,
			lifecycle_phase, ownership_state, eligibility_state, public_state, attempt_state)
			SELECT p, id, 'bounded', jsonb_build_object('namespace', ns),
				'active', 'leased', 'not_applicable', 'active', 'running_attempt' FROM ids)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms)
		SELECT p, id, 0, (extract(epoch FROM now()) * 1000)::bigint - 1000 FROM ids`, n)
	sched := startProc(t, "ffscheduler", schedBin, append(args, "--ui-addr", "off")...)
	schedAddr := awaitMetricsAddr(t, sched)
	fftest.Await(t, 60*time.Second, "the worker counts every item", func() bool {
		return scrape(t, workerAddr).get(`ffriver_items_total{outcome="processed",scanner="attempt_timeout"}`) == n
	})
	awaitDB(sql, 10*time.Second, "expired executions", n, expiredByLane, "bounded")

	// A family's series are its label sets (a histogram's buckets, sum
	// and count are one). 64 is far above what kind, queue, status,
	// attempt, scanner and outcome give, and far below one per partition.
	const most = 64
	for name, addr := range map[string]string{"ffscheduler": schedAddr, "ffworker": workerAddr} {
		m := scrape(t, addr)
		if !m.has(`river_work_count_total`) {
			t.Errorf("%s: no river_work_count_total", name)
		}
		// The producers' fetch metrics (otelriver v0.12, River's metric
		// hook): one label, the queue.
		if !m.has(`river_job_get_available_count_bucket`) {
			t.Errorf("%s: no river_job_get_available_count:\n%s", name, grepLines(m.raw, "river_job_get"))
		}
		largest, largestSets := "", 0
		for family, sets := range m.families() {
			if len(sets) > largestSets {
				largest, largestSets = family, len(sets)
			}
			if len(sets) > most {
				t.Errorf("%s: %s has %d series after items in 256 partitions and 5 namespaces, want at most %d; e.g. %s",
					name, family, len(sets), most, sets[0])
			}
			for _, s := range sets {
				if strings.Contains(s, `tag="`) {
					t.Errorf("%s: %s has a tag label: %s", name, family, s)
					break
				}
			}
		}
		t.Logf("%s: /metrics is %d bytes, %d series; the largest family, %s, has %d label sets",
			name, len(m.raw), len(m.series), largest, largestSets)
	}

	if code := worker.signal(syscall.SIGTERM, 40*time.Second); code != 0 {
		t.Errorf("ffworker exit %d after SIGTERM", code)
	}
	if code := sched.signal(syscall.SIGTERM, 40*time.Second); code != 0 {
		t.Errorf("ffscheduler exit %d after SIGTERM", code)
	}
}

// families returns each metric family's label sets: a histogram's (or
// summary's) _bucket, _sum and _count series are one family, its le (or
// quantile) label left out.
func (m metrics) families() map[string][]string {
	seen := map[string]map[string]bool{}
	for key := range m.series {
		name, labels, _ := strings.Cut(key, "{")
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			name = strings.TrimSuffix(name, suffix)
		}
		var kept []string
		for l := range strings.SplitSeq(strings.TrimSuffix(labels, "}"), ",") {
			if l != "" && !strings.HasPrefix(l, `le="`) && !strings.HasPrefix(l, `quantile="`) {
				kept = append(kept, l)
			}
		}
		labels = strings.Join(kept, ",")
		if seen[name] == nil {
			seen[name] = map[string]bool{}
		}
		seen[name][labels] = true
	}
	out := map[string][]string{}
	for name, sets := range seen {
		for s := range sets {
			out[name] = append(out[name], s)
		}
		slices.Sort(out[name])
	}
	return out
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			b.WriteString(l)
		}
	}
	return b.String()
}

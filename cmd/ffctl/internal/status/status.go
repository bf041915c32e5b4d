// Package status collects what `ffctl status` shows: per scanner, the due
// backlog and the age of the oldest overdue item; River's jobs per queue and
// state; per outbox stream, the newest event, the events held back behind
// an open transaction, and the oldest open writer. The due counts, the
// queue counts and the outbox counts are read through an index and capped
// ("at least N" past their cap), whatever the size of the store.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Report is one status snapshot.
type Report struct {
	Schema string `json:"schema"`
	// RiverSchema holds River's tables (the queues' counts).
	RiverSchema string    `json:"river_schema"`
	Partitions  int       `json:"partitions"`
	At          time.Time `json:"at"`
	Scanners    []Scanner `json:"scanners"`
	Queues      []Queue   `json:"queues"`
	Streams     []Stream  `json:"streams"`
	// Consumers are the named stream consumers (subscribe.Options.Consumer).
	Consumers []Consumer `json:"consumers"`
	// OldestWriter is the longest-open transaction holding a transaction id
	// on the server (any database). Streams do not wait for it unless it
	// wrote to their outbox (Stream.Waiting); it holds back VACUUM.
	OldestWriter *Writer `json:"oldest_writer,omitempty"`
	// Ticks are River's leader, whether it inserts ffriver's ticks, and
	// each scanner's last tick (ffriver.Service.Ticks); nil when not read.
	Ticks *ffriver.TickHealth `json:"ticks,omitempty"`
}

// Consumer is one named stream consumer, and what retention does about it.
type Consumer struct {
	subscribe.ConsumerInfo
	// HoldsRetention says the consumer keeps events that retention would
	// delete (subscribe.ConsumerInfo.HoldsRetention).
	HoldsRetention bool `json:"holds_retention"`
	// Retention says the same in words.
	Retention string `json:"retention"`
}

// ConsumerRetention says in words what a retention of retention does about
// consumer c.
func ConsumerRetention(c subscribe.ConsumerInfo, retention time.Duration) string {
	switch {
	case c.HoldsRetention(retention):
		return fmt.Sprintf("HOLDS events older than %s (until its lag passes %s; ffctl consumer drop releases them)", retention, c.MaxLag)
	case c.Lag > c.MaxLag:
		return "past its max lag: retention no longer waits for it"
	default:
		return "within retention"
	}
}

// Scanner is one scanner's backlog.
type Scanner struct {
	Name     string        `json:"name"`
	Interval time.Duration `json:"interval_ns"`
	Batch    int           `json:"batch"`
	Disabled bool          `json:"disabled,omitempty"`
	// Due items now, over DuePartitions partitions, each partition's
	// counted up to the batch as the scanner's ticks count them: with
	// DueAtLeast set, at least Due (a partition has more than a batch).
	Due           int64 `json:"due"`
	DueAtLeast    bool  `json:"due_at_least,omitempty"`
	DuePartitions int   `json:"due_partitions"`
	// OldestOverdue is how long the oldest due item has been due (0 when
	// nothing is due or the scanner cannot tell).
	OldestOverdue time.Duration `json:"oldest_overdue_ns"`
	// Unprocessable are rows that look due but that no scan of the scanner
	// can process (a partition outside the schema's count, an attempt of no
	// execution, a foreign state string), by reason, each with a query that
	// lists them. They are never counted in Due.
	Unprocessable []workers.Unprocessable `json:"unprocessable,omitempty"`
}

// UnprocessableCount is how many rows of s no scan can process.
func (s Scanner) UnprocessableCount() int64 {
	var n int64
	for _, u := range s.Unprocessable {
		n += u.Count
	}
	return n
}

// Queue is River's job count per state in one queue, each counted up to
// QueueCountCap: a state in StatesAtLeast has more.
type Queue struct {
	Name          string           `json:"name"`
	States        map[string]int64 `json:"states"`
	StatesAtLeast map[string]bool  `json:"states_at_least,omitempty"`
}

// QueueCountCap is the most River jobs of one queue and state a report
// counts; past it the report says "at least" (Queue.StatesAtLeast). River
// UI counts them all. Counting up to 10,001 took 18.6 ms of a report at
// production size (ffctl bench scale: the completed ff_apply jobs).
const QueueCountCap = 1_000

// queuesSQL counts River's jobs per queue and state through River's
// fetch index (river_job_prioritized_fetching_index, on state, queue, …):
// a skip scan finds each state's queues, one index probe each, and each
// queue's jobs of a state are counted up to $1, a bounded range of the
// index read in its order. It runs with dbutil.PlannerSettings: the planner cannot
// tell that the limit bounds the ordered index read and preferred a bitmap
// scan, or a sequential scan and a sort, both of which read every job of
// the state and queue before the limit. Counting them all was a parallel sequential scan of river_job
// (43 ms at 200,000 jobs).
const queuesSQL = `WITH RECURSIVE sq AS (
  SELECT s.state, (SELECT j.queue FROM {S}river_job j WHERE j.state = s.state ORDER BY j.queue LIMIT 1) AS queue
  FROM unnest(enum_range(NULL::{S}river_job_state)) s(state)
  UNION ALL
  SELECT sq.state, (SELECT j.queue FROM {S}river_job j WHERE j.state = sq.state AND j.queue > sq.queue ORDER BY j.queue LIMIT 1)
  FROM sq WHERE sq.queue IS NOT NULL)
SELECT sq.queue, sq.state::text, (SELECT count(*) FROM (SELECT 1 FROM {S}river_job j WHERE j.state = sq.state AND j.queue = sq.queue
  ORDER BY j.priority, j.scheduled_at, j.id LIMIT $1) x)
FROM sq WHERE sq.queue IS NOT NULL
ORDER BY sq.queue, sq.state`

// queues reads River's jobs per queue and state (queuesSQL).
func queues(ctx context.Context, pool *pgxpool.Pool, rs dbutil.Schema) ([]Queue, error) {
	var out []Queue
	err := dbutil.ScopedRead(ctx, pool, dbutil.PlannerSettings, rs.SQL(queuesSQL), []any{QueueCountCap + 1}, func(rows pgx.Rows) error {
		byQueue := map[string]*Queue{}
		var names []string
		for rows.Next() {
			var q, st string
			var n int64
			if err := rows.Scan(&q, &st, &n); err != nil {
				return err
			}
			if byQueue[q] == nil {
				byQueue[q] = &Queue{Name: q, States: map[string]int64{}}
				names = append(names, q)
			}
			if n > QueueCountCap {
				n = QueueCountCap
				if byQueue[q].StatesAtLeast == nil {
					byQueue[q].StatesAtLeast = map[string]bool{}
				}
				byQueue[q].StatesAtLeast[st] = true
			}
			byQueue[q].States[st] = n
		}
		for _, q := range names {
			out = append(out, *byQueue[q])
		}
		return nil
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "status: counting River jobs")
	}
	return out, nil
}

// Stream is one outbox table.
type Stream struct {
	Name string `json:"name"`
	// Events in the table, counted up to StreamCountCap: with
	// EventsAtLeast set there are more. And the newest one.
	Events        int64  `json:"events"`
	EventsAtLeast bool   `json:"events_at_least,omitempty"`
	NewestEventID *int64 `json:"newest_event_id,omitempty"`
	NewestAtMs    *int64 `json:"newest_at_ms,omitempty"`
	// Waiting are the transactions that wrote to the outbox and have been
	// open for a second or more: their events reach streams once they
	// commit. Nothing else waits for them.
	Waiting []subscribe.Wait `json:"waiting"`
	// Partitions are the outbox's time partitions (outbox retention drops
	// them whole), and AheadUntilMs the end of the newest: past it, rows
	// go to the DEFAULT partition, which holds DefaultRows of them
	// (counted up to StreamCountCap; DefaultRowsAtLeast: more).
	Partitions         int    `json:"partitions"`
	AheadUntilMs       *int64 `json:"ahead_until_ms,omitempty"`
	DefaultRows        int64  `json:"default_rows"`
	DefaultRowsAtLeast bool   `json:"default_rows_at_least,omitempty"`
	// RetentionWait, when set, says that the outbox's partition
	// maintenance is waiting for a lock another session holds (its passes
	// leave an attach or a drop for the next one): since when, and who
	// holds it.
	RetentionWait *outboxretention.Wait `json:"retention_wait,omitempty"`
}

// PartitionHealth says in words whether the outbox's time partitions are
// kept (the outbox_retention scanner of an unfiltered scheduler creates
// them ahead), at now.
func (s Stream) PartitionHealth(now time.Time) string {
	rows := fmt.Sprint(s.DefaultRows)
	if s.DefaultRowsAtLeast {
		rows = "at least " + rows
	}
	switch {
	case s.Partitions == 0:
		return fmt.Sprintf("no time partition: every event is in the DEFAULT partition (%s) and retention deletes row by row; "+
			"an unfiltered ffscheduler's outbox_retention scanner creates them", rows)
	case s.AheadUntilMs == nil || *s.AheadUntilMs <= now.UnixMilli():
		return fmt.Sprintf("%d time partitions, none covering now: new events go to the DEFAULT partition (%s); "+
			"is an unfiltered ffscheduler running the outbox_retention scanner?", s.Partitions, rows)
	}
	return fmt.Sprintf("%d time partitions, ahead until %s; DEFAULT partition: %s rows", s.Partitions,
		time.UnixMilli(*s.AheadUntilMs).UTC().Format(time.RFC3339), rows)
}

// Writer is an open transaction with a transaction id.
type Writer struct {
	PID         int           `json:"pid,omitempty"`
	Prepared    string        `json:"prepared,omitempty"`
	Database    string        `json:"database"`
	Application string        `json:"application,omitempty"`
	State       string        `json:"state,omitempty"`
	Age         time.Duration `json:"age_ns"`
}

// StreamCountCap is the most events of an outbox a report counts; past it
// the report says "at least" (Stream.EventsAtLeast). Counting the newest
// 100,001 took 16-21 ms per outbox on a partitioned outbox of 10,000,000
// events, the newest 10,001 about a tenth of that (4.7 ms), the newest
// 1,001 a tenth again.
const StreamCountCap = 1_000

// streamSQL reads an outbox table's row of a report: its newest events
// written at or after $3 (the database's clock at insert, written_at_ms,
// the outbox's partition key) counted up to $1 and the newest one, a
// bounded range of the primary key read backwards however large the outbox
// (counting it all read 5,000,000 index entries, 425 ms); and its
// partitions from the registry, the end of the newest and the DEFAULT
// partition's rows up to $1.
func streamSQL(table string) string {
	return `SELECT n.count, n.max, (SELECT occurred_at_ms FROM {S}` + table + ` WHERE written_at_ms >= $3 ORDER BY event_id DESC LIMIT 1), p.count, p.ahead,
		(SELECT count(*) FROM (SELECT 1 FROM {S}` + outboxretention.DefaultPartition(table) + ` LIMIT $1) d)
		FROM (SELECT count(*), max(event_id) FROM (SELECT event_id FROM {S}` + table + ` WHERE written_at_ms >= $3 ORDER BY event_id DESC LIMIT $1) x) n,
		     (SELECT count(*), max(hi_ms) FILTER (WHERE lo_ms IS NOT NULL) AS ahead FROM {S}ff_outbox_partition WHERE stream = $2) p`
}

// streamWindowSQL returns, for each outbox table of $1, the start of its
// time partition before the one covering now, by the database's clock
// (NULL when it has no two partitions started by now): the window a
// report's stream row reads first.
const streamWindowSQL = `SELECT t.stream, (SELECT p.lo_ms FROM {S}ff_outbox_partition p
	WHERE p.stream = t.stream AND p.lo_ms IS NOT NULL AND p.lo_ms <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint
	ORDER BY p.lo_ms DESC LIMIT 1 OFFSET 1)
	FROM unnest($1::text[]) t(stream)`

// Collect reads a report. f carries the scanners (built as the processes
// build them; its schema must be migrated); retention is the outbox
// retention they run with, against which the consumers are judged. It
// takes about 32 statements (the stored retentions among them, since
// settings live in the schema; one more per outbox whose newest partitions
// hold 1,000 events or fewer; ffctl status adds two for River's leader and
// the ticks, ffriver.Service.Ticks), the scanners' bounded due reads each
// pipelined with its settings in one round trip (it took 53, 12–14 ms at
// p50 on the idle 2-core VM, 8–11 ms with 28). Running its parts side by
// side on more connections was no faster at p50 and slower at p99 with the
// cores busy (56–61 ms against 20–44 ms), and no faster on new connections
// either (27 November, evening), so it reads them one after another.
func Collect(ctx context.Context, pool *pgxpool.Pool, f *ffriver.Service, retention time.Duration) (*Report, error) {
	p := pipeline.Of(f)
	env := p.Env()
	s := dbutil.Schema(env.Schema())
	rs := dbutil.Schema(f.RiverSchema())
	r := &Report{Schema: env.Schema(), RiverSchema: string(rs), Partitions: int(env.Partitions()), At: time.Now()}
	var err error
	if r.Scanners, err = collectScanners(ctx, pool, p); err != nil {
		return nil, err
	}
	if r.Queues, err = queues(ctx, pool, rs); err != nil {
		return nil, err
	}
	if r.OldestWriter, err = oldestWriter(ctx, pool); err != nil {
		return nil, err
	}
	// An outbox's writers are reported once open for WaitNoticeAfter:
	// with no transaction on the server open that long, none is.
	writers := r.OldestWriter != nil && r.OldestWriter.Age >= subscribe.WaitNoticeAfter
	if r.Streams, err = streams(ctx, pool, s, writers); err != nil {
		return nil, err
	}
	cs, err := subscribe.Consumers(ctx, pool, env.Schema())
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	for _, c := range cs {
		r.Consumers = append(r.Consumers, Consumer{ConsumerInfo: c, HoldsRetention: c.HoldsRetention(retention),
			Retention: ConsumerRetention(c, retention)})
	}
	return r, nil
}

// collectScanners reads each scanner's backlog.
func collectScanners(ctx context.Context, pool *pgxpool.Pool, p *pipeline.Pipeline) ([]Scanner, error) {
	backlog, err := p.Backlog(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	var out []Scanner
	for _, b := range backlog {
		st, _ := p.Settings(b.Scanner)
		out = append(out, Scanner{Name: b.Scanner, Interval: st.Interval, Batch: st.Batch, Disabled: st.Disabled,
			Due: b.Due, DueAtLeast: b.AtLeast, DuePartitions: b.Partitions, Unprocessable: b.Unprocessable, OldestOverdue: b.OldestOverdue()})
	}
	return out, nil
}

// streams reads each outbox's row of the report (streamSQL), the open
// transactions that wrote to it (only when writers says that a transaction
// has been open long enough to be one: subscribe.OpenWriters reads the
// server's locks, 2.9 ms of a report on a new connection for both
// outboxes), and whether its partition maintenance is waiting for a lock
// (outboxretention.Waits, one statement for both).
//
// Each row reads the current and the previous time partition first (and
// the DEFAULT one), not the whole outbox: its statement is planned with the
// start of that window as a constant, so the planner opens those
// partitions only. A new connection opened all of them (33 an outbox at
// the 31 days of ffctl bench scale) to plan the read, which made the
// streams 11.6 ms of a report on one, 4.7 ms warm. Event ids and
// written_at_ms are both taken when a row is inserted (written_at_ms is a
// column default that writers never set), so the newest events are the
// newest written: the window holds the newest event, and when it holds
// more events than the count's cap the count is the cap's "at least"
// either way. A window of fewer is read again over every partition, so
// the count of a quiet outbox stays exact.
func streams(ctx context.Context, q workers.Querier, s dbutil.Schema, writers bool) ([]Stream, error) {
	waits, err := outboxretention.Waits(ctx, q, s)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	type table struct{ name, table string }
	var tables []table
	names := subscribe.StreamTables()
	for i, name := range subscribe.Streams() {
		tables = append(tables, table{name, names[i]})
	}
	windows := map[string]int64{}
	rows, err := q.Query(ctx, s.SQL(streamWindowSQL), names)
	if err == nil {
		var table string
		var lo *int64
		_, err = pgx.ForEachRow(rows, []any{&table, &lo}, func() error {
			if lo != nil {
				windows[table] = *lo
			}
			return nil
		})
	}
	if err != nil {
		return nil, dbutil.MapErr(err, "status: reading the outboxes' partitions")
	}
	var out []Stream
	for _, t := range tables {
		st := Stream{Name: t.name}
		read := func(from int64) error {
			return dbutil.MapErr(q.QueryRow(ctx, s.SQL(streamSQL(t.table)), StreamCountCap+1, t.table, from).Scan(&st.Events, &st.NewestEventID,
				&st.NewestAtMs, &st.Partitions, &st.AheadUntilMs, &st.DefaultRows), "status: reading "+t.table)
		}
		from, windowed := windows[t.table]
		if !windowed {
			from = math.MinInt64
		}
		if err := read(from); err != nil {
			return nil, err
		}
		if st.Events <= StreamCountCap && windowed {
			// A quiet window: count the whole outbox.
			if err := read(math.MinInt64); err != nil {
				return nil, err
			}
		}
		if st.Events > StreamCountCap {
			st.Events, st.EventsAtLeast = StreamCountCap, true
		}
		if st.DefaultRows > StreamCountCap {
			st.DefaultRows, st.DefaultRowsAtLeast = StreamCountCap, true
		}
		for _, w := range waits {
			if w.Table == t.table {
				st.RetentionWait = &w
			}
		}
		if writers {
			if st.Waiting, err = subscribe.OpenWriters(ctx, q, string(s), t.table, subscribe.WaitNoticeAfter); err != nil {
				return nil, fmt.Errorf("status: %w", err)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// oldestWriter reads the oldest open transaction on the server that has
// written anything (or a prepared one), nil when there is none.
func oldestWriter(ctx context.Context, pool *pgxpool.Pool) (*Writer, error) {
	var w Writer
	var ageMs float64
	err := pool.QueryRow(ctx, `
		SELECT pid, '' AS prepared, COALESCE(datname, ''), COALESCE(application_name, ''), COALESCE(state, ''),
		       extract(epoch FROM clock_timestamp() - xact_start) * 1000
		FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
		UNION ALL
		SELECT 0, gid, database, '', 'prepared', extract(epoch FROM clock_timestamp() - prepared) * 1000
		FROM pg_prepared_xacts
		ORDER BY 6 DESC LIMIT 1`).Scan(&w.PID, &w.Prepared, &w.Database, &w.Application, &w.State, &ageMs)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, dbutil.MapErr(err, "status: reading open transactions")
	}
	w.Age = time.Duration(ageMs * float64(time.Millisecond))
	return &w, nil
}

// UnprocessableCount is how many rows no scan can process, over every
// scanner.
func (r *Report) UnprocessableCount() int64 {
	var n int64
	for _, s := range r.Scanners {
		n += s.UnprocessableCount()
	}
	return n
}

// WriteText prints r as tables.
func WriteText(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "schema %s, %d partitions, at %s\n", r.Schema, r.Partitions, r.At.UTC().Format(time.RFC3339))
	if r.RiverSchema != r.Schema {
		fmt.Fprintf(tw, "River's tables in schema %s\n", r.RiverSchema)
	}
	fmt.Fprintln(tw)
	writeTicks(tw, r.Ticks)
	fmt.Fprintln(tw, "scanner\tinterval\tbatch\tdue\tpartitions\toldest overdue\tunprocessable")
	for _, s := range r.Scanners {
		name := s.Name
		if s.Disabled {
			name += " (disabled)"
		}
		due := fmt.Sprint(s.Due)
		if s.DueAtLeast {
			due = "at least " + due
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%d\n", name, s.Interval, s.Batch, due, s.DuePartitions, age(s.OldestOverdue), s.UnprocessableCount())
	}
	fmt.Fprintln(tw)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Scanners {
		for _, u := range s.Unprocessable {
			n := fmt.Sprint(u.Count)
			if u.AtLeast {
				n = fmt.Sprintf("at least %d (of the first %d rows that look due)", u.Count, pipeline.AuditCap+1)
			}
			fmt.Fprintf(w, "unprocessable: %s: %s (%s)\n", s.Name, n, u.Reason)
			if u.List != "" {
				fmt.Fprintf(w, "  list them: %s;\n", strings.Join(strings.Fields(u.List), " "))
			}
		}
	}
	if r.UnprocessableCount() > 0 {
		fmt.Fprintln(w)
	}
	states := []string{"available", "running", "scheduled", "retryable", "pending", "completed", "cancelled", "discarded"}
	fmt.Fprintln(tw, "queue\t"+strings.Join(states, "\t"))
	if len(r.Queues) == 0 {
		fmt.Fprintln(tw, "(no River jobs)")
	}
	for _, q := range r.Queues {
		cells := []string{q.Name}
		for _, st := range states {
			n := fmt.Sprint(q.States[st])
			if q.StatesAtLeast[st] {
				n = "at least " + n
			}
			cells = append(cells, n)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "stream\tevents\tnewest event\tnewest at\twaiting on open writers")
	for _, s := range r.Streams {
		id, at := "-", "-"
		if s.NewestEventID != nil {
			id = fmt.Sprint(*s.NewestEventID)
		}
		if s.NewestAtMs != nil {
			at = time.UnixMilli(*s.NewestAtMs).UTC().Format(time.RFC3339)
		}
		waiting := "none"
		if len(s.Waiting) > 0 {
			o := s.Waiting[0]
			who := fmt.Sprintf("pid %d", o.PID)
			if o.Prepared != "" {
				who = "prepared " + o.Prepared
			}
			waiting = fmt.Sprintf("%d (oldest: %s, %s, open for %s)", len(s.Waiting), who, o.Application, age(o.Age))
		}
		events := fmt.Sprint(s.Events)
		if s.EventsAtLeast {
			events = "at least " + events
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, events, id, at, waiting)
	}
	for _, s := range r.Streams {
		fmt.Fprintf(tw, "%s partitions: %s\n", s.Name, s.PartitionHealth(r.At))
		if w := s.RetentionWait; w != nil {
			fmt.Fprintf(tw, "%s outbox retention: %s\n", s.Name, w)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "consumer\tstream\tlag\tmax lag\tattached\tstored at\tretention")
	if len(r.Consumers) == 0 {
		fmt.Fprintln(tw, "(no named consumers)")
	}
	for _, c := range r.Consumers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\t%s\n", c.Name, c.Stream, age(c.Lag), c.MaxLag, c.Attached,
			c.UpdatedAt.UTC().Format(time.RFC3339), c.Retention)
	}
	fmt.Fprintln(tw)
	if o := r.OldestWriter; o != nil {
		who := fmt.Sprintf("pid %d", o.PID)
		if o.Prepared != "" {
			who = "prepared transaction " + o.Prepared
		}
		fmt.Fprintf(tw, "oldest open writer: %s (%s, database %s, %s), open for %s\n", who, o.Application, o.Database, o.State, age(o.Age))
	} else {
		fmt.Fprintln(tw, "oldest open writer: none")
	}
	return tw.Flush()
}

// writeTicks prints River's leader, whether ticks come (or why none does)
// and each scanner's last tick; nothing when t is nil.
func writeTicks(w io.Writer, t *ffriver.TickHealth) {
	if t == nil {
		return
	}
	if l := t.Leader; l == nil {
		fmt.Fprintln(w, "River's leader: none")
	} else {
		does := "no ffriver tick since its election yet"
		switch {
		case l.InsertsTicks:
			does = "inserts ffriver's ticks"
		case t.Stale != nil && t.Stale.Leader == l.ID:
			does = "inserts no ffriver tick: it does not run ffriver's periodic jobs"
		}
		fmt.Fprintf(w, "River's leader: %q, elected %s (%s ago), expires %s: %s\n", l.ID, l.ElectedAt.UTC().Format(time.RFC3339),
			l.For.Round(time.Second), l.ExpiresAt.UTC().Format(time.RFC3339), does)
	}
	fmt.Fprintln(w, t.Summary)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "scanner\tinterval\tlast tick\tlast tick worked")
	for _, s := range t.Scanners {
		name := s.Scanner
		if s.Disabled {
			name += " (disabled)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", name, s.Interval, ago(s.Inserted, s.InsertedAge), ago(s.Worked, s.WorkedAge))
	}
	fmt.Fprintln(w)
}

// ago says how long ago at was, d by the database's clock; "none" when
// at is nil.
func ago(at *time.Time, d time.Duration) string {
	if at == nil {
		return "none"
	}
	return d.Round(time.Millisecond).String() + " ago"
}

// WriteJSON prints r as one JSON document.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

package subscribe

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"go.opentelemetry.io/otel/metric"
)

// Defaults of Options.
const (
	// DefaultPollInterval is how often a stream reads without a wake-up.
	DefaultPollInterval = 200 * time.Millisecond
	// DefaultPageSize is the number of rows one read fetches. Catching up a
	// backlog reads page after page without waiting.
	DefaultPageSize = 5000
	// DefaultBufferSize is the number of decoded events a stream holds ahead
	// of its consumer before the reader blocks.
	DefaultBufferSize = 10000
	// DefaultApplicationName is the application_name of a stream's
	// connections, as pg_stat_activity shows it.
	DefaultApplicationName = "ffriver-subscribe"

	// MaxPageSize bounds Options.PageSize.
	MaxPageSize = 100000
	// MinPollInterval bounds Options.PollInterval from below.
	MinPollInterval = time.Millisecond
)

// Start says where a stream begins.
type Start int

const (
	// StartNow (the default) delivers the events of every transaction that
	// had not committed when the subscribe call took its snapshot, and none
	// of the transactions that had: "from now" in commit order.
	StartNow Start = iota
	// StartBeginning delivers every event still in the table.
	StartBeginning
	// StartAfter delivers the events after Options.After: exactly those
	// that follow it in stream order. A legacy (upstream 9-byte) cursor
	// resumes at the first event whose event_id is greater; see the package
	// documentation.
	StartAfter
	// StartSince delivers the events that occurred (occurred_at_ms) at or
	// after Options.Since and are in the table now, then every event
	// committed later, whenever it occurred.
	StartSince
)

// String returns the name of the start point.
func (s Start) String() string {
	switch s {
	case StartNow:
		return "now"
	case StartBeginning:
		return "beginning"
	case StartAfter:
		return "after-cursor"
	case StartSince:
		return "since"
	default:
		return fmt.Sprintf("Start(%d)", int(s))
	}
}

// Options tune a subscription. The zero value tails every partition of the
// connection's current schema from now.
type Options struct {
	// Schema holding ffriver's tables; "" resolves the connection's
	// current_schema().
	Schema string
	// Partitions to deliver; nil or empty means every partition. Each must
	// be a partition of the schema (0..count-1).
	Partitions []int16
	// Start is where the stream begins (default StartNow).
	Start Start
	// After is the cursor to resume after, with Start == StartAfter. It must
	// be zero otherwise.
	After Cursor
	// Since is the time to start at, with Start == StartSince.
	Since time.Time
	// Filter narrows the stream to one namespace and/or instance tag. It is
	// applied in SQL; rows it drops still advance the stream's position.
	Filter ff.Filter
	// BufferSize is the number of decoded events held ahead of the consumer.
	// When it is full the reader stops reading: a slow consumer slows the
	// stream, it never loses events. 0 means DefaultBufferSize (a stream
	// holds at least one page of events: 1 is the smallest buffer);
	// negative is an error.
	BufferSize int
	// PollInterval is how often the stream reads when no NOTIFY wakes it,
	// at least MinPollInterval. 0 means DefaultPollInterval (a stream that
	// never polls would miss rows written without a wake-up).
	PollInterval time.Duration
	// PageSize is the number of rows one read fetches, 1..MaxPageSize. 0
	// means DefaultPageSize.
	PageSize int
	// ApplicationName of the stream's two connections (default
	// DefaultApplicationName).
	ApplicationName string
	// Logger receives warnings (skipped rows, lost connections); default
	// slog.Default().
	Logger *slog.Logger
	// Consumer names a durable consumer (see "Named consumers" in the
	// package documentation): its acknowledged position is stored in the
	// database, outbox retention keeps what it has not acknowledged, and a
	// new subscription with the same name resumes after it (the stored
	// position then wins over Start). "" (the default) is an anonymous
	// stream. At most MaxConsumerName bytes, printable, no spaces.
	Consumer string
	// ConsumerMaxLag is how old the consumer's position may grow before
	// retention stops waiting for it. 0 means DefaultConsumerMaxLag;
	// negative is an error. Only with Consumer.
	ConsumerMaxLag time.Duration
	// OnWait, when set, hears about each transaction that wrote to the
	// stream's outbox and has stayed open for WaitNoticeAfter (its events
	// wait for it), and again when it ends; see Wait. It is called from
	// the stream's goroutine and must return quickly.
	OnWait func(Wait)
	// MeterProvider, when set, receives the stream's metrics:
	// ffriver.stream.events (Prometheus ffriver_stream_events_total{stream})
	// counts the events Next returned, and ffriver.stream.lag
	// (ffriver_stream_lag_seconds{stream}) is how long after its
	// occurred_at_ms, written in the committing transaction, each was
	// returned. stream is "leases" or "completions". Nothing global is used.
	MeterProvider metric.MeterProvider
}

// config is Options validated and with defaults applied.
type config struct {
	schema       dbutil.Schema // may be "" until resolved
	partitions   []int32       // sorted, unique; nil = all
	start        Start
	after        Cursor
	sinceMs      int64
	filter       ff.Filter
	bufferSize   int
	pollInterval time.Duration
	pageSize     int
	appName      string
	logger       *slog.Logger
	consumer     string
	maxLag       time.Duration
	onWait       func(Wait)
	meters       metric.MeterProvider
}

// Validate checks everything that can be checked without a database, as
// Leases and Completions do first; errors match ff.ErrValidation.
func (o Options) Validate() error {
	_, err := o.validate()
	return err
}

// validate checks everything that can be checked without a database.
func (o Options) validate() (config, error) {
	c := config{
		start:        o.Start,
		after:        o.After,
		filter:       o.Filter,
		bufferSize:   o.BufferSize,
		pollInterval: o.PollInterval,
		pageSize:     o.PageSize,
		appName:      o.ApplicationName,
		logger:       o.Logger,
		meters:       o.MeterProvider,
	}
	var err error
	if c.schema, err = dbutil.ParseSchema(o.Schema); err != nil {
		return config{}, err
	}
	for _, p := range o.Partitions {
		if p < 0 || int(p) >= ff.MaxPartitions {
			return config{}, ff.Validationf("partitions", "%d is outside 0..%d", p, ff.MaxPartitions-1)
		}
		c.partitions = append(c.partitions, int32(p))
	}
	slices.Sort(c.partitions)
	c.partitions = slices.Compact(c.partitions)

	if !o.Since.IsZero() && o.Start != StartSince {
		return config{}, ff.Validationf("since", "a time was given but Start is %s; use StartSince", o.Start)
	}
	switch o.Start {
	case StartNow, StartBeginning, StartSince:
		if !o.After.IsZero() {
			return config{}, ff.Validationf("cursor", "a cursor was given but Start is %s; use StartAfter", o.Start)
		}
		if o.Start == StartSince {
			if o.Since.IsZero() {
				return config{}, ff.Validationf("since", "StartSince needs a time")
			}
			c.sinceMs = o.Since.UnixMilli()
		}
	case StartAfter:
		if err := checkCursor(o.After); err != nil {
			return config{}, err
		}
	default:
		return config{}, ff.Validationf("start", "unknown start point %d", int(o.Start))
	}
	if err := o.Filter.Validate(); err != nil {
		return config{}, err
	}

	switch {
	case c.bufferSize == 0:
		c.bufferSize = DefaultBufferSize
	case c.bufferSize < 0:
		return config{}, ff.Validationf("buffer_size", "%d is negative", c.bufferSize)
	}
	switch {
	case c.pageSize == 0:
		c.pageSize = DefaultPageSize
	case c.pageSize < 0 || c.pageSize > MaxPageSize:
		return config{}, ff.Validationf("page_size", "%d is outside 1..%d", c.pageSize, MaxPageSize)
	}
	switch {
	case c.pollInterval == 0:
		c.pollInterval = DefaultPollInterval
	case c.pollInterval < MinPollInterval:
		return config{}, ff.Validationf("poll_interval", "%s is below %s", c.pollInterval, MinPollInterval)
	}
	if c.appName == "" {
		c.appName = DefaultApplicationName
	}
	if len(c.appName) > 63 {
		return config{}, ff.Validationf("application_name", "%s is longer than 63 bytes", ff.Excerpt(c.appName))
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	c.consumer, c.maxLag, c.onWait = o.Consumer, o.ConsumerMaxLag, o.OnWait
	switch {
	case c.consumer == "" && c.maxLag != 0:
		return config{}, ff.Validationf("consumer_max_lag", "given without a consumer name")
	case c.consumer != "":
		if err := CheckConsumerName(c.consumer); err != nil {
			return config{}, err
		}
		if c.maxLag < 0 {
			return config{}, ff.Validationf("consumer_max_lag", "%s is negative", c.maxLag)
		}
		if c.maxLag == 0 {
			c.maxLag = DefaultConsumerMaxLag
		}
	}
	return c, nil
}

// checkCursor rejects cursors that no stream can have produced. Cursors
// decoded by DecodeCursor always pass; a hand-built Cursor may not.
func checkCursor(c Cursor) error {
	if c.Xact < 0 || c.EventID < 0 {
		return ff.Validationf("cursor", "%#v: negative position", c)
	}
	if c.Legacy && c.Xact != 0 {
		return ff.Validationf("cursor", "%#v: a legacy cursor carries only an event id", c)
	}
	return nil
}

package pipeline

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Cascader is the River implementation of actions.Cascader: it inserts
// one ff.advance job per hop, in the transaction of the terminal transition
// that caused it, into the apply queue of its filter. It uses an insert-only
// River client, so any Store can have one, inside or outside a River worker.
type Cascader struct {
	client *river.Client[pgx.Tx]
	opts   *river.InsertOpts
	filter ff.Filter
}

// NewCascader returns a Cascader inserting into the River tables of
// riverSchema ("" = the search_path) and the apply queue of filter (the
// queue the deployment's workers with that filter work).
func NewCascader(riverSchema string, filter ff.Filter) (*Cascader, error) {
	if _, err := dbutil.ParseSchema(riverSchema); err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: riverSchema})
	if err != nil {
		return nil, fmt.Errorf("ffriver: cascade insert client: %w", err)
	}
	return &Cascader{client: client, opts: itemInsertOpts(filter), filter: filter}, nil
}

// EnqueueHopsTx implements actions.Cascader.
func (c *Cascader) EnqueueHopsTx(ctx context.Context, tx pgx.Tx, hops []actions.Hop) error {
	params := make([]river.InsertManyParams, len(hops))
	for i, h := range hops {
		params[i] = river.InsertManyParams{Args: jobs.AdvanceArgs{Upstream: h.Upstream, FlowID: h.FlowID, Downstream: h.Downstream, Outcome: h.Outcome}, InsertOpts: withTags(c.opts, appendTags([]string{TagItem, TagPartitionPrefix + strconv.Itoa(int(h.Upstream.Partition))}, TagValue(TagNamespacePrefix, c.filter.Namespace)))}
	}
	if _, err := c.client.InsertManyTx(ctx, tx, params); err != nil {
		return dbutil.MapErr(err, "inserting cascade hops")
	}
	return nil
}

package pipeline

import (
	"context"
	"regexp"
	"strconv"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// River job tags on ffriver's jobs, for River UI's tag filter (Jobs, any
// state: "tags" in the URL, e.g. /jobs?state=completed&tags=ns-tenant-a).
// River accepts tags matching `\A[\w][\w\-]+[\w]\z` of at most 255
// characters, so values are sanitized (TagValue).
const (
	// TagItem is on every per-item job (the apply queue): filtering on it
	// shows what the scanners did without the ticks and scans.
	TagItem = "item"
	// TagScannerPrefix + scanner name: ticks, scans and items of a scanner.
	TagScannerPrefix = "scanner-"
	// TagPartitionPrefix + partition number: scans and items of a partition.
	TagPartitionPrefix = "partition-"
	// TagNamespacePrefix + namespace: items of an execution of a namespace
	// (and ticks and scans of a deployment filtered on one).
	TagNamespacePrefix = "ns-"
)

var tagUnsafe = regexp.MustCompile(`[^\w-]`)

// TagValue returns prefix+value as a River tag: characters River refuses are
// replaced by '_', and the tag is cut to 255 bytes. It returns "" when value
// is empty.
func TagValue(prefix, value string) string {
	if value == "" {
		return ""
	}
	t := prefix + tagUnsafe.ReplaceAllString(value, "_")
	if len(t) > 255 {
		t = t[:255]
	}
	// River wants a word character last.
	t = strings.TrimRight(t, "-")
	if len(t) < 3 {
		return ""
	}
	return t
}

// TickTags are the tags of a scanner's ticks.
func TickTags(scanner string, f ff.Filter) []string {
	return appendTags(nil, TagValue(TagScannerPrefix, scanner), TagValue(TagNamespacePrefix, f.Namespace))
}

// TagRescue is on the leader's periodic ff.rescue jobs.
const TagRescue = "rescue"

// rescueTags are the tags of the leader's ff.rescue jobs.
func rescueTags(f ff.Filter) []string {
	return appendTags([]string{TagRescue}, TagValue(TagNamespacePrefix, f.Namespace))
}

// scanTags are the tags of a scan of scanner over parts.
func scanTags(scanner string, f ff.Filter, parts []int16) []string {
	tags := TickTags(scanner, f)
	for _, p := range parts {
		tags = append(tags, TagPartitionPrefix+strconv.Itoa(int(p)))
	}
	return tags
}

func appendTags(tags []string, add ...string) []string {
	for _, t := range add {
		if t != "" {
			tags = append(tags, t)
		}
	}
	return tags
}

// withTags returns a copy of opts carrying tags.
func withTags(opts *river.InsertOpts, tags []string) *river.InsertOpts {
	o := *opts
	o.Tags = tags
	return &o
}

// itemExecution is the execution an item job of a built-in kind acts on, by
// partition and id (ok=false for kinds that act on none, or on one this
// function does not know: a plugin's).
func itemExecution(a river.JobArgs) (p int16, id uuid.UUID, ok bool) {
	switch a := a.(type) {
	case jobs.ExpireAttemptArgs:
		return a.ID.Partition, a.ID.UUID, true
	case jobs.PromoteDelayedArgs:
		return a.ID.Partition, a.ID.UUID, true
	case jobs.ExpireDeadlineArgs:
		return a.ID.Partition, a.ID.UUID, true
	case jobs.CancelGroupArgs:
		return a.Partition, a.DownstreamEID, true
	case jobs.ReconcileGroupArgs:
		return a.Partition, a.DownstreamEID, true
	case jobs.AdvanceArgs:
		return a.Upstream.Partition, a.Downstream, true
	}
	return 0, uuid.Nil, false
}

// tagItems gives each item job of a scan of scanner its tags: TagItem, the
// scanner, the partition of the execution it acts on (else the scan's, when
// it covers one partition) and that execution's namespace, read in one query
// (the filter's namespace when the deployment has one).
func tagItems(ctx context.Context, tx pgx.Tx, env *Env, scanner string, f ff.Filter, parts []int16, params []river.InsertManyParams) error {
	if len(params) == 0 {
		return nil
	}
	base := appendTags([]string{TagItem}, TagValue(TagScannerPrefix, scanner))
	namespaces := map[uuid.UUID]string{}
	if f.Namespace == "" {
		var ps []int16
		var ids [][16]byte
		for _, pr := range params {
			if p, id, ok := itemExecution(pr.Args); ok {
				ps, ids = append(ps, p), append(ids, dbutil.UUID(id))
			}
		}
		if len(ids) > 0 {
			// One primary-key lookup per item, whatever the planner
			// estimates: as a join, a scan's few hundred items were
			// hash-joined against a sequential scan of ff_exec_core, 45 ms
			// a scan with 40,000 executions (pg_stat_statements, ffctl
			// bench expire).
			rows, err := tx.Query(ctx, env.SQL(`SELECT u.id, coalesce((SELECT c.raw_fields->>'namespace' FROM {S}ff_exec_core c
				WHERE c.partition_key = u.p AND c.execution_id = u.id), '')
				FROM unnest($1::int2[], $2::uuid[]) AS u(p, id)`), ps, ids)
			if err != nil {
				return dbutil.MapErr(err, "reading the namespaces of items")
			}
			for rows.Next() {
				var id uuid.UUID
				var ns string
				if err := rows.Scan(&id, &ns); err != nil {
					rows.Close()
					return dbutil.MapErr(err, "reading the namespaces of items")
				}
				namespaces[id] = ns
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return dbutil.MapErr(err, "reading the namespaces of items")
			}
		}
	}
	for i, pr := range params {
		tags := append([]string(nil), base...)
		p, id, ok := itemExecution(pr.Args)
		switch {
		case ok:
			tags = append(tags, TagPartitionPrefix+strconv.Itoa(int(p)))
		case len(parts) == 1:
			tags = append(tags, TagPartitionPrefix+strconv.Itoa(int(parts[0])))
		}
		ns := f.Namespace
		if ns == "" && ok {
			ns = namespaces[id]
		}
		tags = appendTags(tags, TagValue(TagNamespacePrefix, ns))
		params[i].InsertOpts = withTags(pr.InsertOpts, tags)
	}
	return nil
}

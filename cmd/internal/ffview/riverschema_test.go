package ffview_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/ffview"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/migrations"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// TestRiverJobsInRiversOwnSchema: with River's tables in a schema of their
// own (ffriver.Config.RiverSchema), the execution page finds its River
// jobs there (Options.RiverSchema).
func TestRiverJobsInRiversOwnSchema(t *testing.T) {
	t.Parallel()
	ffdb := testdb.New(t, &testdb.Options{NoMigrate: true, MaxConns: 4})
	riverdb := testdb.New(t, &testdb.Options{NoMigrate: true, MaxConns: 4})
	ctx := t.Context()
	if _, err := migrations.Migrate(ctx, ffdb.Pool, ffdb.Schema, &migrations.Options{Partitions: 8, RiverSchema: riverdb.Schema}); err != nil {
		t.Fatal(err)
	}
	st, err := executions.Open(ctx, ffdb.Pool, executions.Config{Schema: ffdb.Schema})
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.Create(ctx, executions.CreateParams{Lane: "lane-a"})
	if err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(ffdb.Pool), &river.Config{Schema: riverdb.Schema})
	if err != nil {
		t.Fatal(err)
	}
	job, err := client.Insert(ctx, jobs.PromoteDelayedArgs{ID: id}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ffview.New(st, ffview.Options{RiverSchema: riverdb.Schema})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, view: v}
	e.get(execPath(id)).want(t, http.StatusOK, jobs.KindPromoteDelayed, `href="/jobs/`+strconv.FormatInt(job.Job.ID, 10)+`"`)
	if _, err := ffview.New(st, ffview.Options{RiverSchema: `bad"name`}); err == nil {
		t.Error("a malformed River schema was accepted")
	}
}

package cli_test

import (
	"errors"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/cli"
)

func TestAddFilter(t *testing.T) {
	fs := cli.NewFlagSet("x", "", "")
	f := cli.AddFilter(fs, "ns", "tag")
	if err := fs.Parse([]string{"--namespace", "a'; drop", "--instance-tag", "cairn.instance_id=i=1"}); err != nil {
		t.Fatal(err)
	}
	if f.Namespace != "a'; drop" || f.InstanceTag == nil || f.InstanceTag.Key != "cairn.instance_id" || f.InstanceTag.Value != "i=1" {
		t.Fatalf("filter = %+v", f)
	}
	for _, bad := range [][]string{{"--instance-tag", "novalue"}, {"--instance-tag", "=v"}, {"--namespace", "a\x00b"}} {
		fs := cli.NewFlagSet("x", "", "")
		cli.AddFilter(fs, "ns", "tag")
		err := fs.Parse(bad)
		var ue *cli.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("Parse(%q) = %v, want a usage error", bad, err)
		}
	}
	fs = cli.NewFlagSet("x", "", "")
	f = cli.AddFilter(fs, "ns", "tag")
	if err := fs.Parse(nil); err != nil || !f.IsZero() {
		t.Fatalf("no flags: %+v, %v", f, err)
	}
}

package main

import (
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/cli"
)

// filterFlags are --namespace and --instance-tag.
type filterFlags struct {
	namespace string
	tag       string
	filter    ff.Filter
}

func (f *filterFlags) add(fs *cli.FlagSet) {
	fs.StringVar(&f.namespace, "namespace", "", "scanner filter: only executions of this `namespace`. ffscheduler carries its filter\n"+
		"in the tick and scan jobs; ffworker works only the jobs of the same filter")
	fs.StringVar(&f.tag, "instance-tag", "", "scanner filter: only executions whose tag `key=value` matches (as --namespace)")
}

func (f *filterFlags) check() error {
	f.filter = ff.Filter{Namespace: f.namespace}
	if f.tag != "" {
		t, err := ff.ParseTag(f.tag)
		if err != nil {
			return cli.Usagef("--instance-tag: %v", err)
		}
		f.filter.InstanceTag = &t
	}
	if err := f.filter.Validate(); err != nil {
		return cli.Usagef("%v", err)
	}
	return nil
}

package cli

import "github.com/ffriver/ffriver/ff"

// AddFilter registers --namespace and --instance-tag (key=value) on fs, with
// the given help texts, and returns where the checked ff.Filter lands after
// fs.Parse. A malformed tag or filter is a usage error.
func AddFilter(fs *FlagSet, namespaceHelp, tagHelp string) *ff.Filter {
	var namespace, tag string
	f := &ff.Filter{}
	fs.StringVar(&namespace, "namespace", "", namespaceHelp)
	fs.StringVar(&tag, "instance-tag", "", tagHelp)
	fs.AfterParse(func() error {
		*f = ff.Filter{Namespace: namespace}
		if tag != "" {
			t, err := ff.ParseTag(tag)
			if err != nil {
				return Usagef("--instance-tag: %v", err)
			}
			f.InstanceTag = &t
		}
		if err := f.Validate(); err != nil {
			return Usagef("%v", err)
		}
		return nil
	})
	return f
}

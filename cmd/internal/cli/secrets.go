package cli

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/ffriver/ffriver/internal/redact"
)

// The passwords of the connection strings this process parsed (AddCommon):
// Report and the loggers of NewLogger mask them in whatever they print.
var secrets struct {
	sync.Mutex
	list []string
}

func addSecrets(s []string) {
	secrets.Lock()
	defer secrets.Unlock()
	for _, v := range s {
		if v != "" {
			secrets.list = append(secrets.list, v)
		}
	}
}

// Scrub returns msg with every password of the connection strings parsed by
// AddCommon (and $PGPASSWORD) replaced by "xxxxx".
func Scrub(msg string) string {
	secrets.Lock()
	list := secrets.list
	secrets.Unlock()
	if len(list) == 0 {
		return msg
	}
	return redact.Scrub(msg, list)
}

// scrubAttr masks passwords in a log attribute's value: strings, errors and
// anything formatted with %v.
// The handlers call it for the message too.
func scrubAttr(a slog.Attr) slog.Attr {
	secrets.Lock()
	none := len(secrets.list) == 0
	secrets.Unlock()
	if none {
		return a
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Scrub(v.String()))
	case slog.KindAny:
		s := fmt.Sprint(v.Any())
		if c := Scrub(s); c != s {
			a.Value = slog.StringValue(c)
		}
	case slog.KindGroup:
		as := v.Group()
		out := make([]slog.Attr, len(as))
		for i, g := range as {
			out[i] = scrubAttr(g)
		}
		a.Value = slog.GroupValue(out...)
	}
	return a
}

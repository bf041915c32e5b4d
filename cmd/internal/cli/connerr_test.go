package cli_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
)

// A first connection that fails is one sentence saying what is wrong and
// what to check, not pgx's chain of dial errors and FATALs.
func TestConnectErrorsAreSentences(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	withDB := func(db string) string { v := *u; v.Path = "/" + db; return v.String() }
	withUser := func(user string) string { v := *u; v.User = url.User(user); return v.String() }
	// Every server of a multi-host URL read-only, as standbys are (the
	// test server made so by default_transaction_read_only), or gone.
	standbys := func() string {
		v := *u
		v.Host += ",127.0.0.1:1"
		q := v.Query()
		q.Set("target_session_attrs", "read-write")
		q.Set("options", "-c default_transaction_read_only=on")
		q.Set("connect_timeout", "5")
		v.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads no + as a space
		return v.String()
	}
	for _, c := range []struct {
		name, url string
		want      []string
		transient bool
	}{
		{"refused", "postgres://u:secret@127.0.0.1:1/db?connect_timeout=5",
			[]string{"connecting to postgres://u:xxxxx@127.0.0.1:1/db", "nothing answers at 127.0.0.1:1 (connection refused)", "--database-url"}, true},
		{"refused, every host", "postgres://u:secret@127.0.0.1:1,127.0.0.1:2/db?connect_timeout=5",
			[]string{"nothing answers at 127.0.0.1:1, 127.0.0.1:2 (connection refused)", "--database-url"}, true},
		{"no writable host", standbys(),
			[]string{"no server at " + u.Host + ", 127.0.0.1:1 accepts writes", "a failover may be under way"}, true},
		{"unknown database", withDB("ff_no_such_database"),
			[]string{`database "ff_no_such_database" does not exist`, "check the database name in --database-url"}, false},
		{"unknown role", withUser("ff_no_such_role"),
			[]string{`refused role "ff_no_such_role"`, "check the user in --database-url"}, false},
	} {
		_, err := (&cli.Common{DatabaseURL: c.url}).OpenPool(context.Background(), cli.PoolOptions{})
		var ce *cli.ConnectError
		if !errors.As(err, &ce) {
			t.Errorf("%s: %v; want a *cli.ConnectError", c.name, err)
			continue
		}
		msg := err.Error()
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", c.name, msg, w)
			}
		}
		for _, chain := range []string{"dial error", "SQLSTATE", "failed to connect to", "secret"} {
			if strings.Contains(msg, chain) {
				t.Errorf("%s: %q still carries %q", c.name, msg, chain)
			}
		}
		if errors.Is(err, ff.ErrUnavailable) != c.transient {
			t.Errorf("%s: errors.Is(ErrUnavailable) = %t, want %t", c.name, !c.transient, c.transient)
		}
	}
}

package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestLoggerAndReportMaskThePassword: once a connection string is parsed,
// log lines (message, string, error and any attributes, text and JSON) and
// Report never show its password.
func TestLoggerAndReportMaskThePassword(t *testing.T) {
	const conn = "host=127.0.0.1 port=1 user=u password = 'Lg Secr3t'"
	fs, c, _ := newTestFlagSet(nil)
	if err := fs.Parse([]string{"--database-url", conn}); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{LogText, LogJSON} {
		var b bytes.Buffer
		l := NewLogger(&b, format, c.LogLevel)
		l.With("conn", conn).Info("connecting with "+conn, "err", errors.New("failed: "+conn), "any", []string{conn}, "pw", "Lg Secr3t")
		if strings.Contains(b.String(), "Secr3t") || !strings.Contains(b.String(), "xxxxx") {
			t.Errorf("%s log line: %s", format, b.String())
		}
	}
	var b bytes.Buffer
	Report(&b, "ffctl x", errors.New("cannot use "+conn))
	if strings.Contains(b.String(), "Secr3t") {
		t.Errorf("Report: %s", b.String())
	}
}

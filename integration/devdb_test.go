package integration

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/internal/testproc"
)

// A DATABASE_URL that does not answer is an error of scripts/devdb.sh (and
// so of make test, make demo, make migrate), never replaced by another
// database: `make migrate` with a mistyped URL migrated the local server.
func TestDevdbRefusesASetURLThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("psql"); err != nil {
		if _, err := exec.LookPath("pg_isready"); err != nil {
			t.Skip("neither psql nor pg_isready: devdb.sh cannot probe a URL here")
		}
	}
	cmd := exec.Command("bash", filepath.Join("..", "scripts", "devdb.sh"))
	cmd.Env = append(testproc.Env(), "DATABASE_URL=postgres://nobody@127.0.0.1:1/nothing?sslmode=disable&connect_timeout=2")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("devdb.sh with a dead DATABASE_URL: %v, stdout %q, stderr %q; want exit 1", err, stdout.String(), stderr.String())
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "does not answer") || !strings.Contains(stderr.String(), "unset DATABASE_URL") {
		t.Errorf("stdout %q, stderr %q; want no URL and a message saying the set URL does not answer", stdout.String(), stderr.String())
	}
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/ffriver/ffriver/ff"
	"github.com/jackc/pgx/v5/pgconn"
)

// ConnectError is a failed first connection said in one sentence: what is
// wrong and what to check. The chain pgx built (every address tried, the
// server's FATAL) stays reachable through Unwrap, and a binary logs it at
// debug level.
type ConnectError struct {
	// What went wrong, e.g. "nothing answers at 127.0.0.1:5499".
	What string
	// Hint says what to check or change.
	Hint string
	// Transient failures (nothing answers, a timeout, a server starting up)
	// match ff.ErrUnavailable.
	Transient bool
	Err       error
}

// Error implements error.
func (e *ConnectError) Error() string { return e.What + ": " + e.Hint }

// Unwrap returns pgx's error.
func (e *ConnectError) Unwrap() error { return e.Err }

// Is makes a transient failure match ff.ErrUnavailable.
func (e *ConnectError) Is(target error) bool { return e.Transient && target == ff.ErrUnavailable }

// checkURL is the hint's way of naming where the connection string comes
// from.
const checkURL = "--database-url (or $DATABASE_URL)"

// explainConnect turns the error of a first connection to cfg's server
// into a ConnectError when it recognises it, else returns err.
func explainConnect(cfg *pgconn.Config, err error) error {
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if len(cfg.Fallbacks) > 0 { // a multi-host URL, or sslmode=prefer's second try
		addrs := []string{addr}
		for _, fb := range cfg.Fallbacks {
			if a := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))); !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		addr = strings.Join(addrs, ", ")
	}
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, pgconn.ErrReadOnlyConnection):
		// target_session_attrs=read-write, and no server of the URL is
		// writable: a standby, whose promotion may be under way.
		return &ConnectError{What: fmt.Sprintf("no server at %s accepts writes (each one that answered is a standby)", addr),
			Hint:      "a failover may be under way: it passes once a standby is promoted; else check that " + checkURL + " names the primary",
			Transient: true, Err: err}
	case errors.As(err, &pgErr):
		switch pgErr.Code {
		case "28P01":
			return &ConnectError{What: fmt.Sprintf("the server at %s refused the password of role %q", addr, cfg.User),
				Hint: "check the password in " + checkURL + " or PGPASSWORD", Err: err}
		case "28000":
			return &ConnectError{What: fmt.Sprintf("the server at %s refused role %q: %s", addr, cfg.User, pgErr.Message),
				Hint: "check the user in " + checkURL + ", and that the server's pg_hba.conf lets it in from this host", Err: err}
		case "3D000":
			return &ConnectError{What: fmt.Sprintf("database %q does not exist on the server at %s", cfg.Database, addr),
				Hint: "create it, or check the database name in " + checkURL, Err: err}
		case "57P03":
			return &ConnectError{What: fmt.Sprintf("the server at %s is starting up or shutting down", addr),
				Hint: "try again in a moment", Transient: true, Err: err}
		case "57P01", "57P02":
			return &ConnectError{What: fmt.Sprintf("the server at %s is shutting down or restarting", addr),
				Hint: "try again in a moment", Transient: true, Err: err}
		}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &ConnectError{What: fmt.Sprintf("nothing answers at %s (connection refused)", addr),
			Hint: "check that the server runs and that " + checkURL + " names its host and port", Transient: true, Err: err}
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &ConnectError{What: fmt.Sprintf("the server at %s closed the connection before it was open", addr),
			Hint: "it may be restarting; else check that " + checkURL + " names a Postgres server's host and port", Transient: true, Err: err}
	case errors.As(err, &dnsErr):
		return &ConnectError{What: fmt.Sprintf("the host %q is unknown", cfg.Host),
			Hint: "check the host in " + checkURL, Transient: true, Err: err}
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return &ConnectError{What: fmt.Sprintf("%s did not answer within %s", addr, cfg.ConnectTimeout),
			Hint: "check that the host is reachable from here (a firewall, a wrong address in " + checkURL + ")", Transient: true, Err: err}
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Package redact hides database passwords: in a connection string of any
// form libpq and pgx accept (a URL, also one url.Parse rejects; a password or
// sslpassword query parameter; keyword/value pairs with spaces around "=" and
// quoted values), and in any message that may repeat one, such as the errors
// pgx builds from a connection string.
package redact

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Mask replaces a password.
const Mask = "xxxxx"

// secretKeys are the connection parameters whose values are secrets.
var secretKeys = []string{"password", "sslpassword"}

func isSecretKey(k string) bool {
	return slices.Contains(secretKeys, strings.ToLower(strings.TrimSpace(k)))
}

// isURL reports whether pgx parses s as a URL (else as keyword/value pairs).
func isURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// ConnString returns s with every password in it replaced by Mask, whether or
// not s parses: a URL keeps its scheme, user, host and other parameters;
// keyword/value pairs keep their other pairs. When the boundaries of a
// password are ambiguous (a malformed string), more is masked, never less.
func ConnString(s string) string {
	if isURL(s) || strings.Contains(s, "://") {
		return urlString(s)
	}
	out, _ := keywordValue(s)
	return Scrub(out, Secrets(s))
}

// urlString masks a URL's userinfo password, found up to the last "@" of
// the whole string (a password may hold an unencoded "@", "/" or "?"), and
// its password and sslpassword query parameters.
func urlString(s string) string {
	i := strings.Index(s, "://") + 3
	out := s
	if at := strings.LastIndex(s, "@"); at >= i {
		userinfo := s[i:at]
		if c := strings.Index(userinfo, ":"); c >= 0 {
			userinfo = userinfo[:c+1] + Mask
		}
		out = s[:i] + userinfo + s[at:]
	}
	if q := strings.Index(out, "?"); q >= 0 {
		params := strings.Split(out[q+1:], "&")
		for j, p := range params {
			k, _, ok := strings.Cut(p, "=")
			if dk, err := url.QueryUnescape(k); err == nil {
				k = dk
			}
			if ok && isSecretKey(k) {
				params[j] = p[:strings.Index(p, "=")+1] + Mask
			}
		}
		out = out[:q+1] + strings.Join(params, "&")
	}
	return Scrub(out, Secrets(s))
}

// Secrets returns every string of s that may be a password, as spelled in s
// and decoded, under each way a parser may read s. Scrub removes them from a
// message.
func Secrets(s string) []string {
	var out []string
	add := func(v string) {
		if v == "" {
			return
		}
		out = append(out, v)
		if d, err := url.PathUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
	}
	// A URL, or what looks like userinfo: what follows the first ":" up to the
	// last "@" of the string, and up to the last "@" of the authority (url.Parse).
	start, schemed := 0, false
	if i := strings.Index(s, "://"); i >= 0 {
		start, schemed = i+3, true
	}
	authority := s[start:]
	if e := strings.IndexAny(authority, "/?#"); e >= 0 {
		authority = authority[:e]
	}
	for _, ui := range []string{upToLast(s[start:], "@"), upToLast(authority, "@")} {
		// Without a scheme, only a lone user:password@host word is userinfo.
		if _, pw, ok := strings.Cut(ui, ":"); ok && (schemed || !strings.ContainsAny(ui, " \t\n=")) {
			add(pw)
		}
	}
	if u, err := url.Parse(s); err == nil {
		if u.User != nil {
			pw, _ := u.User.Password()
			add(pw)
		}
		for k, vs := range u.Query() {
			if isSecretKey(k) {
				for _, v := range vs {
					add(v)
				}
			}
		}
	}
	// Query parameters however malformed the URL: password=… up to "&".
	if q := strings.Index(s, "?"); q >= 0 {
		for _, p := range strings.Split(s[q+1:], "&") {
			k, v, ok := strings.Cut(p, "=")
			if dk, err := url.QueryUnescape(k); err == nil {
				k = dk
			}
			if ok && isSecretKey(k) {
				add(v)
			}
		}
	}
	// Keyword/value pairs.
	_, kv := keywordValue(s)
	for _, v := range kv {
		add(v)
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// upToLast returns s up to the last sep, or "" without one.
func upToLast(s, sep string) string {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i]
	}
	return ""
}

// keywordValue walks s as libpq's keyword/value syntax (keyword = value,
// spaces allowed around "=", a value quoted with ' and backslash escapes, or
// unquoted up to white space with backslash escapes) and returns s with the
// values of password and sslpassword masked, and those values as written and
// unescaped. A malformed pair after a secret keyword masks the rest of s.
func keywordValue(s string) (masked string, secrets []string) {
	var b strings.Builder
	i := 0
	for i < len(s) {
		// Copy white space.
		for i < len(s) && isSpace(s[i]) {
			b.WriteByte(s[i])
			i++
		}
		if i >= len(s) {
			break
		}
		kStart := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[kStart:i]
		j := i
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		if j >= len(s) || s[j] != '=' {
			// Not a pair: copy the word (the parser will refuse it).
			b.WriteString(s[kStart:i])
			continue
		}
		j++
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		vStart := j
		var val strings.Builder
		terminated := true
		if j < len(s) && s[j] == '\'' {
			j++
			terminated = false
			for j < len(s) {
				if s[j] == '\\' && j+1 < len(s) {
					val.WriteByte(s[j+1])
					j += 2
					continue
				}
				if s[j] == '\'' {
					j++
					terminated = true
					break
				}
				val.WriteByte(s[j])
				j++
			}
		} else {
			for j < len(s) && !isSpace(s[j]) {
				if s[j] == '\\' && j+1 < len(s) {
					val.WriteByte(s[j+1])
					j += 2
					continue
				}
				val.WriteByte(s[j])
				j++
			}
		}
		b.WriteString(s[kStart:vStart])
		if !isSecretKey(key) {
			b.WriteString(s[vStart:j])
			i = j
			continue
		}
		raw := s[vStart:j]
		if !terminated {
			raw = s[vStart:]
			j = len(s)
		}
		secrets = append(secrets, raw, strings.Trim(raw, "'"), val.String())
		b.WriteString(Mask)
		i = j
	}
	return b.String(), secrets
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// Scrub returns msg with every secret replaced by Mask: as it is, percent-
// encoded, and escaped as Go's %q does (url.Parse's errors quote the URL). A
// quoted fragment of msg that is part of a secret ("%zz" of the password
// "PW%zz" in `invalid URL escape "%zz"`) is masked too.
func Scrub(msg string, secrets []string) string {
	var forms []string
	for _, s := range secrets {
		if s == "" {
			continue
		}
		forms = append(forms, s, url.QueryEscape(s), url.PathEscape(s), strings.Trim(strconv.Quote(s), `"`))
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range slices.Compact(forms) {
		msg = strings.ReplaceAll(msg, f, Mask)
	}
	return scrubQuoted(msg, secrets)
}

// scrubQuoted masks each "…" fragment of msg (two bytes or more) that is
// part of a secret.
func scrubQuoted(msg string, secrets []string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			break
		}
		j := strings.IndexByte(msg[i+1:], '"')
		if j < 0 {
			break
		}
		frag := msg[i+1 : i+1+j]
		b.WriteString(msg[:i+1])
		if part(frag, secrets) {
			b.WriteString(Mask)
		} else {
			b.WriteString(frag)
		}
		b.WriteByte('"')
		msg = msg[i+1+j+1:]
	}
	b.WriteString(msg)
	return b.String()
}

func part(frag string, secrets []string) bool {
	if len(frag) < 2 {
		return false
	}
	if u, err := strconv.Unquote(`"` + frag + `"`); err == nil {
		frag = u
	}
	for _, s := range secrets {
		if strings.Contains(s, frag) {
			return true
		}
	}
	return false
}

package uiserver

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Guard wraps River UI's handler h, served on the listener address served,
// against other web pages in the operator's browser (River UI can cancel,
// retry and delete jobs, and on loopback it runs without credentials):
//
//   - A request whose Host is not an address of this server is refused with
//     403 (DNS rebinding: a page of evil.example whose name now resolves to
//     127.0.0.1 sends Host evil.example). Answered are: "localhost" and
//     loopback IPs with the served port, the served IP with its port (every
//     interface address when listening on all of them), and allowed: "name"
//     with any port, or "name:port".
//   - A state-changing request (any method but GET, HEAD and OPTIONS) that a
//     browser marks cross-origin — Sec-Fetch-Site other than same-origin or
//     none, or an Origin whose host is not the Host — is refused with 403
//     (net/http.CrossOriginProtection).
//   - A state-changing request whose Content-Type is not application/json is
//     refused with 415, unless the browser attests that it comes from River
//     UI's own page (Sec-Fetch-Site: same-origin, or an Origin equal to the
//     Host): River UI's page itself posts its JSON as text/plain and pauses
//     queues without a body, and no other page can set those headers.
//   - Every answer, whatever its status, forbids framing by a page of
//     another origin: X-Frame-Options: SAMEORIGIN and
//     Content-Security-Policy: frame-ancestors 'self' (clickjacking: a page
//     of another site framed the view's cancel confirmation invisibly over
//     a button of its own, and one real click cancelled the execution; the
//     post was the view's own, same-origin, so no other rule could tell).
//
// Requests without browser headers (curl, scripts) pass the origin check,
// so they must send their JSON as application/json.
//
// The execution view's actions (POST /ff/executions/{id}/cancel and
// /revoke) are HTML form posts (application/x-www-form-urlencoded), not
// JSON: the third rule lets them through only when the browser attests that
// they come from a page of this origin (Sec-Fetch-Site: same-origin, or an
// Origin equal to the Host), which every current browser sends with a form
// post. A script posting to /ff/ must send an Origin naming this server.
func Guard(h http.Handler, served net.Addr, allowed []string) (http.Handler, error) {
	tcp, ok := served.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("guard: %v is not a TCP address", served)
	}
	g := &guard{next: h, port: strconv.Itoa(tcp.Port), exact: map[string]bool{}, anyPort: map[string]bool{}}
	g.exact[strings.ToLower(net.JoinHostPort("localhost", g.port))] = true
	for _, a := range hostIPs(tcp.IP) {
		g.exact[net.JoinHostPort(a.String(), g.port)] = true
	}
	for _, a := range allowed {
		host, err := ParseAllowedHost(a)
		if err != nil {
			return nil, err
		}
		if _, _, err := net.SplitHostPort(host); err == nil {
			g.exact[host] = true
		} else {
			g.anyPort[host] = true
		}
	}
	g.csrf = http.NewCrossOriginProtection()
	return g, nil
}

// ParseAllowedHost checks one entry of an allowed-hosts list ("name" or
// "name:port", an IPv6 address in brackets) and returns it in the form
// Guard compares: lower case, brackets kept.
func ParseAllowedHost(s string) (string, error) {
	h := strings.ToLower(strings.TrimSpace(s))
	if h == "" || strings.ContainsAny(h, "/?#@ \t") {
		return "", fmt.Errorf("allowed host %q: want a host name or IP, optionally with :port", s)
	}
	if host, port, err := net.SplitHostPort(h); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
			return "", fmt.Errorf("allowed host %q: want a host name or IP, optionally with a :port in 1..65535", s)
		}
		return h, nil
	}
	if strings.Contains(strings.Trim(h, "[]"), ":") && !strings.HasPrefix(h, "[") {
		// A bare IPv6 address: bracket it, as a Host header does.
		if ip := net.ParseIP(h); ip != nil {
			return "[" + ip.String() + "]", nil
		}
		return "", fmt.Errorf("allowed host %q: want a host name or IP, optionally with :port", s)
	}
	return h, nil
}

// hostIPs are the IPs a request to a listener on ip may name: the loopback
// addresses always, ip itself, and every interface address when ip is
// unspecified (0.0.0.0, ::).
func hostIPs(ip net.IP) []net.IP {
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if ip != nil && !ip.IsUnspecified() {
		return append(ips, ip)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				ips = append(ips, n.IP)
			}
		}
	}
	return ips
}

type guard struct {
	next    http.Handler
	port    string
	exact   map[string]bool // host:port, lower case
	anyPort map[string]bool // host, lower case
	csrf    *http.CrossOriginProtection
}

// Framing, a decision: SAMEORIGIN and frame-ancestors 'self', not DENY and
// 'none'. Both pairs keep every other origin out, which is what stops
// clickjacking (the framing page must be the attacker's); a page that can
// frame under 'self' is one of this server's own, River UI's or the
// view's, and whoever can put a page there has no need of a frame. The two
// headers say the same thing, so browsers that only know X-Frame-Options
// and those that obey the CSP (which then wins) behave alike; DENY beside
// 'self' would not. The CSP is added, not set: River UI sends no policy
// today, and one it adds is kept beside this one (browsers apply both).
const (
	frameOptions   = "SAMEORIGIN"
	frameAncestors = "frame-ancestors 'self'"
)

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", frameOptions)
	w.Header().Add("Content-Security-Policy", frameAncestors)
	if !g.hostAllowed(r.Host) {
		http.Error(w, "forbidden: Host "+strconv.Quote(r.Host)+" is not an address of this River UI"+
			" (ffscheduler --ui-allowed-hosts adds names)", http.StatusForbidden)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		g.next.ServeHTTP(w, r)
		return
	}
	if err := g.csrf.Check(r); err != nil {
		http.Error(w, "forbidden: a state-changing request from another origin (Origin "+strconv.Quote(r.Header.Get("Origin"))+
			", Sec-Fetch-Site "+strconv.Quote(r.Header.Get("Sec-Fetch-Site"))+")", http.StatusForbidden)
		return
	}
	if !isJSON(r.Header.Get("Content-Type")) && !sameOrigin(r) {
		if strings.HasPrefix(r.URL.Path, ViewPrefix) {
			http.Error(w, "forbidden: a form post to the execution view must come from its own page"+
				" (the browser's Origin or Sec-Fetch-Site: same-origin); a script must send Origin: http://"+r.Host,
				http.StatusForbidden)
			return
		}
		http.Error(w, "unsupported media type: a state-changing request must send Content-Type: application/json",
			http.StatusUnsupportedMediaType)
		return
	}
	g.next.ServeHTTP(w, r)
}

// hostAllowed reports whether a request's Host header names this server.
func (g *guard) hostAllowed(hostHeader string) bool {
	h := strings.ToLower(hostHeader)
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port: the scheme's default.
		host, port = strings.Trim(h, "[]"), "80"
		if strings.Contains(host, ":") {
			h = "[" + host + "]:80"
		} else {
			h = host + ":80"
		}
	}
	if host == "" {
		return false
	}
	if g.exact[h] {
		return true
	}
	bare := host
	if strings.Contains(host, ":") {
		bare = "[" + host + "]"
	}
	if g.anyPort[bare] {
		return true
	}
	if port != g.port {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isJSON reports whether a Content-Type is application/json (with any
// parameters, such as charset).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// sameOrigin reports whether the browser attests that the request comes from
// a page of this very origin: Sec-Fetch-Site: same-origin, or an Origin whose
// host is the Host. Pages cannot set either header.
func sameOrigin(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") == "same-origin" {
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

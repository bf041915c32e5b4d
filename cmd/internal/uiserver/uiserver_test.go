package uiserver_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/uiserver"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:0": true, "[::1]:80": true, "127.1.2.3:9": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.1:80": false, "example.com:80": false, "127.0.0.1": false,
	} {
		if got := uiserver.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestBasicAuth(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := uiserver.BasicAuth(ok, "ada", "s3cret")
	for _, c := range []struct {
		user, pass string
		set        bool
		want       int
	}{
		{"ada", "s3cret", true, http.StatusTeapot},
		{"ada", "wrong", true, http.StatusUnauthorized},
		{"bob", "s3cret", true, http.StatusUnauthorized},
		{"", "", false, http.StatusUnauthorized},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if c.set {
			r.SetBasicAuth(c.user, c.pass)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%q/%q: %d, want %d", c.user, c.pass, w.Code, c.want)
		}
		if w.Code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
			t.Error("401 without a WWW-Authenticate challenge")
		}
	}
}

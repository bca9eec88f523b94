package store_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redisonce/redisonce/internal/redact"
	"github.com/redisonce/redisonce/store"
)

// No error of Open*, ClientOptions or RedactURL shows a Redis
// password, for any URL a user can write, parsable or not. Each password is
// three distinctive fragments joined by one special character; an error (or
// any error it wraps) that holds one fragment shows part of the password.

// secretFragments are the pieces of every test password.
var secretFragments = []string{"Zm9v", "YmFy", "cXV4"}

// secretURLs returns URLs whose password holds each of / # ? @ : %, bare and
// %-escaped, in the URL forms the stores accept, all pointing at an address
// where nothing listens (127.0.0.1:1).
func secretURLs() []string {
	var pws []string
	for _, c := range []string{"/", "#", "?", "@", ":", "%", "+", "!"} {
		pws = append(pws, strings.Join(secretFragments, c))
	}
	pws = append(pws, "Zm9v%2FYmFy%23cXV4", "Zm9v%40YmFy%3AcXV4", "Zm9v%YmFy%zzcXV4")
	var out []string
	for _, pw := range pws {
		for _, form := range []string{
			"redis://:%s@127.0.0.1:1/0",
			"redis://app:%s@127.0.0.1:1",
			"rediss://app:%s@127.0.0.1:1/2",
			"redis://:%s@127.0.0.1:1?addr=127.0.0.1:2&master_set=mymaster",
			"redis://:%s@127.0.0.1:1/0?dial_timeout=1s",
			"unix://:%s@/tmp/nowhere.sock",
		} {
			out = append(out, fmt.Sprintf(form, pw))
		}
	}
	// Digits only: "redis://:1234/5678@host" parses as host ":1234" and a
	// path, so a dial error would quote "1234", the first half.
	out = append(out, "redis://:Zm9v1234/cXV4YmFy@127.0.0.1:1")
	return out
}

// leaks returns the fragments of the password that s shows.
func leaks(s string) []string {
	var out []string
	for _, f := range secretFragments {
		if strings.Contains(s, f) {
			out = append(out, f)
		}
	}
	return out
}

// errTexts is err's text, its %+v and %#v, and those of every error it wraps.
func errTexts(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		out = append(out, e.Error(), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e))
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, w := range u.Unwrap() {
				walk(w)
			}
		}
	}
	walk(err)
	return out
}

func TestNoPasswordInOpenErrors(t *testing.T) {
	for _, u := range secretURLs() {
		if got := leaks(redact.URL(u)); len(got) > 0 {
			t.Errorf("redact.URL(%s) = %q shows %v", u, redact.URL(u), got)
		}
		_, oerr := store.ClientOptions(u)
		_, cerr := store.OpenClaims(u)
		_, xerr := store.OpenOutbox(u)
		_, rerr := store.OpenRecords(u)
		for name, err := range map[string]error{"ClientOptions": oerr, "OpenClaims": cerr, "OpenOutbox": xerr, "OpenRecords": rerr} {
			if name != "ClientOptions" && err == nil {
				t.Errorf("%s(%s) connected to nothing", name, u)
			}
			for _, text := range errTexts(err) {
				if got := leaks(text); len(got) > 0 {
					t.Errorf("%s(%s): error shows %v of the password: %s", name, u, got, text)
				}
			}
		}
	}
}

// A URL whose password holds an unescaped "/", "?" or "#" is refused with
// (an unescaped "@" is not: the userinfo ends at the last "@", as url.Parse reads it)
// ErrInvalidArgument (it cannot be read the way its writer meant it, and
// rueidis would dial part of the password as the host), saying what to do.
func TestAmbiguousPasswordRefused(t *testing.T) {
	for _, u := range []string{
		"redis://:Zm9v/YmFy@127.0.0.1:6379/0",
		"redis://:Zm9v#YmFy@127.0.0.1:6379",
		"redis://:Zm9v?YmFy@127.0.0.1:6379",
		"redis://:1234/5678@127.0.0.1:6379",
	} {
		_, err := store.ClientOptions(u)
		if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), "escape") {
			t.Errorf("ClientOptions(%s) = %v; want ErrInvalidArgument saying to %%-escape the password", u, err)
		}
	}
	// The same passwords %-escaped are read as written.
	opt, err := store.ClientOptions("redis://app:Zm9v%2FYmFy%23x%3Fy%40z%25@127.0.0.1:6379/0")
	if err != nil || opt.Password != "Zm9v/YmFy#x?y@z%" || opt.Username != "app" {
		t.Errorf("escaped password: %q/%q, %v", opt.Username, opt.Password, err)
	}
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://:pw@host:6379/0", "redis://:xxxxx@host:6379/0"},
		{"redis://app:pw@host:6379", "redis://app:xxxxx@host:6379"},
		{"redis://host:6379", "redis://host:6379"},
		{"redis://app@host:6379", "redis://app@host:6379"},
		{"redis://:p/w#x?y@z@host:6379/1?master_set=m", "redis://:xxxxx@host:6379/1?master_set=m"},
		{"redis://:p%zz@host", "redis://:xxxxx@host"},
		{"host:pw@rest", "xxxxx@rest"},
	} {
		if got := redact.URL(tc.in); got != tc.want {
			t.Errorf("redact.URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzNoPasswordInOpenErrors: for any password a URL can carry, RedactURL
// hides it, ClientOptions' error never holds it, and a URL ClientOptions
// accepts never has it in the addresses rueidis would dial (a dial error
// quotes them).
func FuzzNoPasswordInOpenErrors(f *testing.F) {
	for _, pw := range []string{"Zm9v/YmFy", "Zm9v#YmFy", "Zm9v?YmFy", "Zm9v@YmFy", "Zm9v:YmFy", "Zm9v%YmFy", "123456/789", "Zm9v%2FYmFy"} {
		f.Add("app", pw, "127.0.0.1:1/0")
		f.Add("", pw, "127.0.0.1:1?addr=127.0.0.1:2&master_set=m")
	}
	f.Fuzz(func(t *testing.T, user, pw, rest string) {
		u := "redis://" + user + ":" + pw + "@" + rest
		if len(pw) < 6 || strings.ContainsAny(user, ":@/?#") || strings.ContainsAny(pw, "\"\\") || strings.Count(u, pw) != 1 {
			// a password short enough to appear by chance, one the URL text
			// repeats, or one whose quote characters an error's %q adds
			t.Skip()
		}
		quoted := strconv.Quote(pw)
		shows := func(text string) bool {
			return strings.Contains(text, pw) || strings.Contains(text, quoted[1:len(quoted)-1])
		}
		if others := strconv.Quote("redis://" + user + ":@" + rest); shows(others) {
			t.Skip() // the rest of the URL, quoted, already spells the password
		}
		if got := redact.URL(u); shows(got) {
			t.Fatalf("redact.URL(%q) = %q", u, got)
		}
		opt, err := store.ClientOptions(u)
		for _, text := range errTexts(err) {
			if shows(text) {
				t.Fatalf("ClientOptions(%q): %s", u, text)
			}
		}
		if err == nil && strings.Contains(strings.Join(opt.InitAddress, ","), pw) {
			t.Fatalf("ClientOptions(%q) dials %v", u, opt.InitAddress)
		}
	})
}

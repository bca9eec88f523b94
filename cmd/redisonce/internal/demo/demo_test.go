package demo

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/redisonce/redisonce/internal/redisproc"
)

func TestPrintTalliesFailsOnMismatch(t *testing.T) {
	var b bytes.Buffer
	bad := printTallies(&b, []Section{{Name: "claims"}, {Name: "other"}},
		[]Tally{{Delivered: 3, Unique: 2, Effects: 2, Replays: NA, Stale: NA}, {Delivered: 3, Unique: 2, Effects: 3}})
	if !strings.Contains(bad, "other: 3 effects applied for 2 unique messages") || strings.Contains(bad, "claims") {
		t.Errorf("printTallies reason %q", bad)
	}
	if !regexp.MustCompile(`(?m)^ *claims +3 +0 +2 +2 +- +- +ok$`).MatchString(b.String()) ||
		!regexp.MustCompile(`(?m)^ *other +3 +0 +2 +3 +0 +0 +FAIL$`).MatchString(b.String()) {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestRunFailsWhenEffectsDiffer(t *testing.T) {
	if _, err := redisproc.LookPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skip(err)
	}
	srv := redisproc.StartT(t, redisproc.Options{})
	broken := Section{Name: "broken", Run: func(context.Context, *Env) (Tally, error) {
		return Tally{Delivered: 4, Duplicates: 1, Unique: 2, Effects: 3, Replays: NA, Stale: NA}, nil
	}}
	var out bytes.Buffer
	err := Run(context.Background(), Options{URL: srv.URL(), Out: &out, Sections: []Section{broken}})
	if err == nil || err.Error() != "exactly-once broken: broken: 3 effects applied for 2 unique messages" {
		t.Errorf("Run = %v", err)
	}
	if strings.Contains(out.String(), "\nok:") || !regexp.MustCompile(`(?m)^ *broken +4 +1 +2 +3 +- +- +FAIL$`).MatchString(out.String()) {
		t.Errorf("no FAIL row, or an ok line:\n%s", out.String())
	}
}

// A simulated process reaches the master through password-protected
// sentinels, as the stores' own clients do (store.ClientOptions).
func TestProcessSentinelURL(t *testing.T) {
	if _, err := redisproc.LookPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skip(err)
	}
	dep := redisproc.StartSentinelT(t, redisproc.SentinelOptions{Server: redisproc.Options{Password: "s3cret"}})
	p, err := (&Env{url: dep.URL()}).newProcess()
	if err != nil {
		t.Fatalf("newProcess on %s: %v", dep.URL(), err)
	}
	defer p.client.Close()
	if err := p.client.Do(context.Background(), p.client.B().Ping().Build()).Error(); err != nil {
		t.Errorf("PING through the process's client: %v", err)
	}
}

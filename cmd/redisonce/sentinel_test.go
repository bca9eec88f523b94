package main

import (
	"os"
	"strings"
	"testing"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestSentinelURL: the tool takes a Sentinel URL (master_set) and reaches the
// master through password-protected sentinels.
func TestSentinelURL(t *testing.T) {
	if _, err := redisproc.LookPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skip(err)
	}
	d := redisproc.StartSentinelT(t, redisproc.SentinelOptions{Server: redisproc.Options{Password: "s3cret"}})
	code, out, errs := cli(t, "load", "--url", d.URL())
	if code != 0 {
		t.Fatalf("load --url <sentinel URL>: exit %d, stderr %q", code, errs)
	}
	if sha := mustDo(t, d.Servers[0], "SCRIPT", "EXISTS", strings.Fields(out)[1]); sha != "1" {
		t.Errorf("load printed %q, but the master does not have the first script", out)
	}
	code, out, errs = cli(t, "stats", "--url", d.URL())
	if code != 0 || !strings.Contains(out, "1 primary: "+d.Servers[0].Addr) {
		t.Errorf("stats --url <sentinel URL>: exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	if strings.Contains(out+errs, "s3cret") {
		t.Errorf("the output shows the password:\n%s%s", out, errs)
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestSmoke runs every variant of every operation for a few milliseconds, so
// the comparison runner cannot rot between `make bench` runs: each variant must
// do its operation without an error and appear in the report.
func TestSmoke(t *testing.T) {
	if _, err := redisproc.LookPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cfg := config{duration: 20 * time.Millisecond, warmup: 5 * time.Millisecond, goroutines: []int{1, 3}, pool: 20_000,
		serverCPU: -1, options: true, smoke: true, reps: 1}
	var out bytes.Buffer
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	for _, op := range operations() {
		if !strings.Contains(report, "### "+op.name+" — ") {
			t.Errorf("report has no table for %s", op.name)
		}
		for _, v := range op.variants {
			for _, g := range []string{"| 1 | ", "| 3 | "} {
				if !strings.Contains(report, g+v.name+" | ") {
					t.Errorf("report has no row %q%s", g, v.name)
				}
			}
		}
	}
	if !strings.Contains(report, "## Goals") {
		t.Error("report has no goals")
	}
	if t.Failed() {
		t.Log(report)
	}
}

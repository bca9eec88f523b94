// Command layoutcmp measures what a record layout costs the server: the
// server CPU per call of each script of go-job's lifecycle (acquire a new
// key, update it to completed with a result, acquire the duplicate), and the
// memory of a completed record, for several layouts side by side: the
// figures behind the records layout (BENCHMARKS.md, "The records layout").
//
//	taskset -c 1 go run ./cmd/layoutcmp -server-cpu 0 -layout a=DIR -layout c=DIR ...
//
// Each DIR holds acquire.lua and update.lua taking the store's ARGV (acquire:
// ttl_ms, token, fingerprint, lease_ms; update: token, "status", s,
// "payload", p). "plain" is go-job's store, measured with its own plain
// commands: SET NX PX of a JSON string; GET, SET PX; SET NX, GET. Rounds
// rotate the layouts; per step and layout the median of the rounds is shown.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
)

type layouts []string

func (l *layouts) String() string     { return strings.Join(*l, ",") }
func (l *layouts) Set(v string) error { *l = append(*l, v); return nil }

type layout struct {
	name            string
	acquire, update string // SHA1s; "" for plain
}

var steps = []string{"acquire new", "update completed", "acquire duplicate"}

func main() {
	var ls layouts
	flag.Var(&ls, "layout", "name=DIR of acquire.lua and update.lua (repeatable); plain = go-job's commands")
	cpu := flag.Int("server-cpu", -1, "pin redis-server to this CPU")
	n := flag.Int("n", 5000, "lifecycles per round and layout")
	rounds := flag.Int("rounds", 7, "rounds")
	size := flag.Int("result", 256, "result bytes")
	flag.Parse()
	if err := run(ls, *cpu, *n, *rounds, *size); err != nil {
		fmt.Fprintln(os.Stderr, "layoutcmp:", err)
		os.Exit(1)
	}
}

func run(specs []string, cpu, n, rounds, size int) error {
	srv, err := redisproc.Start(redisproc.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	if cpu >= 0 {
		if out, err := exec.Command("taskset", "-a", "-p", "-c", strconv.Itoa(cpu), strconv.Itoa(srv.Pid())).CombinedOutput(); err != nil {
			return fmt.Errorf("taskset: %v: %s", err, out)
		}
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{strings.TrimPrefix(srv.URL(), "redis://")}, DisableCache: true})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	var all []layout
	for _, s := range specs {
		name, dir, _ := strings.Cut(s, "=")
		l := layout{name: name}
		if dir != "" {
			for _, f := range []struct {
				file string
				sha  *string
			}{{"acquire.lua", &l.acquire}, {"update.lua", &l.update}} {
				src, err := os.ReadFile(filepath.Join(dir, f.file))
				if err != nil {
					return err
				}
				if *f.sha, err = c.Do(ctx, c.B().ScriptLoad().Script(string(src)).Build()).ToString(); err != nil {
					return fmt.Errorf("%s %s: %w", name, f.file, err)
				}
			}
		}
		all = append(all, l)
	}
	result := make([]byte, size)
	for i := range result {
		result[i] = 'a' + byte(i%26)
	}
	cpuPer := map[string][][]float64{} // layout -> step -> rounds
	for _, l := range all {
		cpuPer[l.name] = make([][]float64, len(steps))
	}
	for r := 0; r < rounds; r++ {
		for k := range all {
			l := all[(k+r)%len(all)]
			if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
				return err
			}
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "idempotency:" + id()
			}
			tokens := make([]string, n)
			for s := range steps {
				cmds := make(rueidis.Commands, 0, n)
				for i, key := range keys {
					cmds = append(cmds, l.cmd(c, s, key, &tokens[i], result)...)
				}
				before := serverCPU(ctx, c)
				for i := 0; i < len(cmds); i += 64 {
					res := c.DoMulti(ctx, cmds[i:min(i+64, len(cmds))]...)
					for j, x := range res {
						if err := l.check(s, x, &tokens[(i+j)/l.per(s)]); err != nil {
							return fmt.Errorf("%s %s: %w", l.name, steps[s], err)
						}
					}
				}
				cpuPer[l.name][s] = append(cpuPer[l.name][s], (serverCPU(ctx, c)-before)/float64(n)*1e6)
			}
		}
	}
	fmt.Printf("server CPU µs per call (INFO used_cpu_user+sys, median of %d rounds of %d, pipelined 64 deep), %d-byte result\n\n", rounds, n, size)
	fmt.Printf("| layout | %s | lifecycle |\n|---|---:|---:|---:|---:|\n", strings.Join(steps, " | "))
	for _, l := range all {
		var sum float64
		row := "| " + l.name
		for s := range steps {
			m := median(cpuPer[l.name][s])
			sum += m
			row += fmt.Sprintf(" | %.2f", m)
		}
		fmt.Printf("%s | %.2f |\n", row, sum)
	}
	fmt.Printf("\nMEMORY USAGE key SAMPLES 0 of a completed record (36-byte key id, 32-byte token, no fingerprint)\n\n| layout | 48 B result | 256 B result |\n|---|---:|---:|\n")
	for _, l := range all {
		row := "| " + l.name
		for _, sz := range []int{48, 256} {
			key, tok := "idempotency:"+id()+"0000", ""
			if err := l.check(0, c.Do(ctx, l.cmd(c, 0, key, &tok, nil)[0]), &tok); err != nil {
				return err
			}
			for _, cmd := range l.cmd(c, 1, key, &tok, make([]byte, sz)) {
				if err := c.Do(ctx, cmd).Error(); err != nil {
					return err
				}
			}
			m, err := c.Do(ctx, c.B().MemoryUsage().Key(key).Samples(0).Build()).AsInt64()
			if err != nil {
				return err
			}
			row += fmt.Sprintf(" | %d", m)
		}
		fmt.Println(row + " |")
	}
	return nil
}

// per is the number of commands a step sends per lifecycle.
func (l layout) per(s int) int {
	if l.acquire == "" && s > 0 {
		return 2
	}
	return 1
}

func (l layout) cmd(c rueidis.Client, s int, key string, tok *string, result []byte) rueidis.Commands {
	b := c.B()
	if l.acquire == "" { // go-job's store: a JSON string
		switch s {
		case 0:
			*tok = id()
			return rueidis.Commands{b.Set().Key(key).Value(jobJSON("processing", nil)).Nx().PxMilliseconds(86400000).Build()}
		case 1:
			return rueidis.Commands{b.Get().Key(key).Build(), b.Set().Key(key).Value(jobJSON("completed", result)).PxMilliseconds(86400000).Build()}
		default:
			return rueidis.Commands{b.Set().Key(key).Value(jobJSON("processing", nil)).Nx().PxMilliseconds(86400000).Build(), b.Get().Key(key).Build()}
		}
	}
	switch s {
	case 0, 2:
		t := id()
		if s == 0 {
			*tok = t
		}
		return rueidis.Commands{b.Evalsha().Sha1(l.acquire).Numkeys(1).Key(key).Arg("86400000", t, "", "30000").Build()}
	default:
		return rueidis.Commands{b.Evalsha().Sha1(l.update).Numkeys(1).Key(key).Arg(*tok, "status", "completed", "payload", rueidis.BinaryString(result)).Build()}
	}
}

func (l layout) check(s int, r rueidis.RedisResult, _ *string) error {
	if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	if l.acquire == "" {
		return nil
	}
	switch s {
	case 0, 2:
		a, err := r.ToArray()
		if err != nil || len(a) != 10 {
			return fmt.Errorf("acquire reply %v", r)
		}
		if f, _ := a[0].AsInt64(); f != map[int]int64{0: 1, 2: 0}[s] {
			return fmt.Errorf("acquired %d at step %d", f, s)
		}
		if st, _ := a[1].ToString(); s == 2 && st != "completed" {
			return fmt.Errorf("duplicate sees %q", st)
		}
	default:
		if v, err := r.AsInt64(); err != nil || v != 1 {
			return fmt.Errorf("update reply %v", r)
		}
	}
	return nil
}

// jobJSON is the shape of go-job's stored record.
func jobJSON(status string, result []byte) string {
	b, _ := json.Marshal(struct {
		Status    string    `json:"status"`
		Result    []byte    `json:"result,omitempty"`
		CreatedAt time.Time `json:"created_at"`
		UpdatedAt time.Time `json:"updated_at"`
	}{status, result, time.Now(), time.Now()})
	return string(b)
}

func serverCPU(ctx context.Context, c rueidis.Client) float64 {
	info, _ := c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func id() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/inspect"
	"github.com/redisonce/redisonce/cmd/redisonce/internal/server"
)

func callCommand() *command {
	return &command{
		name:    "call",
		args:    "NAME KEY [ARG...]",
		summary: "run one script by hand: EVALSHA (or --fcall: FCALL) with KEY and ARGs",
		help: `
Runs one script the way a non-Go caller does, with exactly the KEYS and ARGV its
header documents ('redisonce show NAME'): EVALSHA <sha1> 1 KEY ARG... (the
_RO variant for read-only scripts), or with --fcall, FCALL redisonce_NAME 1 KEY
ARG... (FCALL_RO). It does not load anything: a script not loaded is an error
that says to run 'redisonce load' (or 'redisonce functions --load').
Integers and strings print as they are, a nil reply as (nil), an array one
element per line. Put -- before arguments that start with "-".

A batch script (claim_many, seen_many) takes several keys, all in one hash
slot: --keys N says how many of the arguments are keys.

  redisonce call claim bq:idemp:m1 86400000 1      1 = first delivery
  redisonce call claim bq:idemp:m2 30000 '~tok'    a lease won: its fence (19 digits)
  redisonce call seen bq:idemp:m1                  1 = claimed
  redisonce call --fcall forget bq:idemp:m1
  redisonce call --keys 2 claim_many bq:idemp:{o7}a bq:idemp:{o7}b 86400000 1`,
		nargs: atLeast(2),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			fcall := fs.Bool("fcall", false, "run the Functions library's redisonce_NAME with FCALL instead of EVALSHA")
			nkeys := fs.Int("keys", 0, "how many arguments are keys, for a batch script (default: the script's own count)")
			u := urlFlag(fs, defaultURL)
			return func(ctx context.Context, e *env, args []string) error {
				s, err := scriptNamed(args[0])
				if err != nil {
					return err
				}
				n := s.NumKeys
				switch {
				case *nkeys != 0 && !s.Batch:
					return usageError{fmt.Sprintf("%s takes %d key(s); --keys is for batch scripts", s.Name, s.NumKeys)}
				case *nkeys < 0:
					return usageError{"--keys must be at least 1"}
				case *nkeys > 0:
					n = *nkeys
				}
				if len(args)-1 < n {
					return usageError{fmt.Sprintf("%s takes %d key(s), then its ARGV", s.Name, n)}
				}
				keys, argv := args[1:1+n], args[1+n:]
				srv, err := server.Connect(ctx, *u)
				if err != nil {
					return err
				}
				defer srv.Close()
				c := srv.Client
				var cmd rueidis.Completed
				nk := int64(n)
				switch {
				case *fcall && s.ReadOnly:
					cmd = c.B().FcallRo().Function(redisonce.FunctionName(s.Name)).Numkeys(nk).Key(keys...).Arg(argv...).Build()
				case *fcall:
					cmd = c.B().Fcall().Function(redisonce.FunctionName(s.Name)).Numkeys(nk).Key(keys...).Arg(argv...).Build()
				case s.ReadOnly:
					cmd = c.B().EvalshaRo().Sha1(s.SHA1).Numkeys(nk).Key(keys...).Arg(argv...).Build()
				default:
					cmd = c.B().Evalsha().Sha1(s.SHA1).Numkeys(nk).Key(keys...).Arg(argv...).Build()
				}
				cctx, cancel := context.WithTimeout(ctx, server.CmdTimeout)
				defer cancel()
				m, err := c.Do(cctx, cmd).ToMessage()
				if err != nil {
					return explainCall(err, srv.Where, s, *fcall)
				}
				return printReply(e.stdout, m)
			}
		},
	}
}

// explainCall names the script in the errors that concern it.
func explainCall(err error, where string, s redisonce.Script, fcall bool) error {
	if re, ok := rueidis.IsRedisErr(err); ok {
		switch {
		case re.IsNoScript():
			return fmt.Errorf("script %s (sha1 %s) is not loaded on %s (NOSCRIPT): run 'redisonce load' with the same --url, "+
				"then retry (a restart, failover or SCRIPT FLUSH empties the script cache)", s.Name, s.SHA1, where)
		case fcall && strings.Contains(re.Error(), "Function not found"):
			return fmt.Errorf("function %s is not loaded on %s (%s): run 'redisonce functions --load' with the same --url, then retry",
				redisonce.FunctionName(s.Name), where, re.Error())
		}
	}
	return server.Explain(err, where)
}

// printReply writes a reply: integers and strings as they are, nil as (nil),
// arrays (and maps) one element per line.
func printReply(w io.Writer, m rueidis.RedisMessage) error {
	var lines []string
	var walk func(m rueidis.RedisMessage)
	walk = func(m rueidis.RedisMessage) {
		switch {
		case m.IsNil():
			lines = append(lines, "(nil)")
		case m.IsInt64():
			n, _ := m.AsInt64()
			lines = append(lines, strconv.FormatInt(n, 10))
		case m.IsArray() || m.IsMap():
			vals, _ := m.ToArray()
			if len(vals) == 0 {
				lines = append(lines, "(empty array)")
			}
			for _, v := range vals {
				walk(v)
			}
		default:
			s, err := m.ToString()
			if err != nil {
				s = m.String()
			}
			lines = append(lines, inspect.Show(s)) // bytes from Redis: never raw to the terminal
		}
	}
	walk(m)
	_, err := io.WriteString(w, strings.Join(lines, "\n")+"\n")
	return err
}

package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/redis/rueidis"
)

// Explain turns an error from the server at where into one line that says
// what to do. Errors it does not know pass through with the address added.
func Explain(err error, where string) error {
	if err == nil {
		return nil
	}
	if e := explainTransport(err, where); e != nil {
		return e
	}
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return fmt.Errorf("%s: %w", where, err)
	}
	return explainReply(re.Error(), where)
}

// explainTransport explains errors of the network and the client, or
// returns nil.
func explainTransport(err error, where string) error {
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		return fmt.Errorf("cannot resolve the host of %s (%v): check the host in --url / REDIS_URL", where, dns)
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("cannot connect to %s (%v): is redis-server running there? "+
			"Start one, or point --url / REDIS_URL at one ('redisonce demo' starts its own)", where, op.Err)
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer from %s in time (%v): check the address, a firewall, or a server busy with a slow command", where, err)
	case errors.Is(err, rueidis.ErrClosing):
		return fmt.Errorf("the connection to %s was closed: %v", where, err)
	}
	return nil
}

// explainReply explains an error reply of the server.
func explainReply(msg, where string) error {
	code, _, _ := strings.Cut(msg, " ")
	switch {
	case code == "WRONGPASS":
		return fmt.Errorf("the server at %s refused the user or password (%s): fix the credentials in --url / REDIS_URL "+
			"(redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port with ACL users)", where, msg)
	case code == "NOAUTH":
		return fmt.Errorf("the server at %s needs a password (NOAUTH): give it in --url / REDIS_URL as redis://:PASSWORD@host:port", where)
	case code == "NOPERM":
		return fmt.Errorf("the user in --url may not do this on %s (%s): grant it the scripting and function commands "+
			"(ACL SETUSER <user> +@scripting ...), or the read commands for inspect and stats", where, msg)
	case code == "NOSCRIPT":
		return fmt.Errorf("a script is not loaded on %s (NOSCRIPT): run 'redisonce load' with the same --url "+
			"(after a restart, failover or SCRIPT FLUSH the script cache is empty; Go stores reload by themselves)", where)
	case strings.Contains(msg, "Function not found"):
		return fmt.Errorf("the function is not loaded on %s (%s): run 'redisonce functions --load' with the same --url", where, msg)
	case IsOldServerError(msg):
		return fmt.Errorf("the server at %s does not understand #!lua script flags (%s): redisonce needs Redis >= 7.0 "+
			"(or Valkey >= 7.2): upgrade the server", where, msg)
	case code == "READONLY":
		return fmt.Errorf("%s is a read-only replica (%s): point --url at the primary", where, msg)
	case code == "LOADING":
		return fmt.Errorf("%s is still loading its data set: retry in a moment", where)
	case code == "OOM":
		return fmt.Errorf("%s is out of memory (%s): nothing was written; free memory or raise maxmemory", where, msg)
	case strings.Contains(msg, "DB index is out of range"):
		return fmt.Errorf("%s has no such database (%s): fix the /db number at the end of --url", where, msg)
	}
	return fmt.Errorf("%s answered: %s", where, msg)
}

// IsOldServerError recognises how a server without script flags (Redis < 7.0)
// rejects a script that starts with "#!lua": a Lua syntax error on line 1, or
// a shebang it does not know.
func IsOldServerError(msg string) bool {
	return strings.Contains(msg, "shebang") ||
		(strings.Contains(msg, "Error compiling script") && strings.Contains(msg, ":1:") && strings.Contains(msg, "'#'"))
}

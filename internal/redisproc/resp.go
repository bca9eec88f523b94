package redisproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// doTimeout bounds one Do call: dial, write and read.
const doTimeout = 10 * time.Second

// maxBulk is the largest bulk string Do accepts (Redis's proto-max-bulk-len).
const maxBulk = 512 << 20

// ReplyError is an error reply from the server, without the leading '-',
// e.g. "NOAUTH Authentication required.". Its first word is the error code.
type ReplyError string

// Error returns the server's error text.
func (e ReplyError) Error() string { return string(e) }

// Do sends one command over a fresh TCP connection (preceded by AUTH when the
// server has a Password) and returns the reply as text: simple and bulk
// strings as they are, integers in decimal, a nil reply as "", and arrays as
// their elements' text joined by "\n" (nested arrays flattened, an error
// element as its message). An error reply is returned as a ReplyError.
//
// Do is a convenience for setup and checks in tests, not a client: it opens a
// connection per call and speaks RESP2 only.
func (s *Server) Do(args ...string) (string, error) {
	return s.do(doTimeout, args...)
}

func (s *Server) do(timeout time.Duration, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("redisproc: Do needs a command")
	}
	conn, err := net.DialTimeout("tcp", s.Addr, timeout)
	if err != nil {
		return "", fmt.Errorf("redisproc: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))

	w := bufio.NewWriter(conn)
	if s.opts.Password != "" {
		writeCommand(w, []string{"AUTH", s.opts.Password})
	}
	writeCommand(w, args)
	if err := w.Flush(); err != nil {
		return "", fmt.Errorf("redisproc: %s: %w", args[0], err)
	}
	r := bufio.NewReader(conn)
	if s.opts.Password != "" {
		if _, err := readReply(r); err != nil {
			return "", annotate("AUTH", err)
		}
	}
	out, err := readReply(r)
	if err != nil {
		return "", annotate(args[0], err)
	}
	return out, nil
}

// annotate adds context to I/O and protocol errors and leaves server error
// replies as they are, so callers can errors.As them into a ReplyError.
func annotate(cmd string, err error) error {
	var re ReplyError
	if errors.As(err, &re) {
		return err
	}
	return fmt.Errorf("redisproc: %s: %w", cmd, err)
}

// writeCommand encodes args as a RESP array of bulk strings.
func writeCommand(w *bufio.Writer, args []string) {
	fmt.Fprintf(w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
	}
}

// readReply reads one RESP2 reply. A top-level error reply is returned as a
// ReplyError; errors nested in arrays become their text.
func readReply(r *bufio.Reader) (string, error) {
	line, err := readLine(r)
	if err != nil {
		return "", err
	}
	if line == "" {
		return "", errors.New("empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+', ':':
		return body, nil
	case '-':
		return "", ReplyError(body)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxBulk {
			return "", fmt.Errorf("bad bulk length %q", body)
		}
		if n == -1 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return "", errors.New("bulk string not terminated by CRLF")
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return "", fmt.Errorf("bad array length %q", body)
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			part, err := readReply(r)
			var re ReplyError
			if errors.As(err, &re) {
				part, err = string(re), nil
			}
			if err != nil {
				return "", err
			}
			parts = append(parts, part)
		}
		return strings.Join(parts, "\n"), nil
	default:
		return "", fmt.Errorf("unsupported reply type %q", line[0])
	}
}

// readLine reads up to CRLF and returns the line without it.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(line, "\r\n") {
		return "", fmt.Errorf("reply line %q not terminated by CRLF", line)
	}
	return line[:len(line)-2], nil
}

// Package redact keeps passwords out of what the stores and tools of this
// repository print: a Redis URL in a message or a log.
package redact

import "strings"

// URL returns rawURL for a message or a log: its password, if it has
// one, replaced by "xxxxx". It does not rely on the URL parsing: the userinfo
// is the text between "://" (without one: the start) and the LAST "@", as its
// writer means it (a password may hold "/", "?", "#", "@" or a bad "%"
// escape; a host never holds "@"), and the password is what follows the
// userinfo's first ":". Every error of the stores' Open functions and of
// store.ClientOptions shows the URL this way.
func URL(rawURL string) string {
	head, user, _, tail, ok := SplitUserinfo(rawURL)
	switch {
	case !ok:
		return rawURL
	case head == "":
		return "xxxxx@" + tail
	}
	return head + user + ":xxxxx@" + tail
}

// SplitUserinfo cuts rawURL around its password (see URL): head is up
// to the userinfo ("redis://"), user the user name, pw the password as
// written (still %-escaped) and tail what follows the last "@". ok is false
// when there is no password.
func SplitUserinfo(rawURL string) (head, user, pw, tail string, ok bool) {
	i := strings.Index(rawURL, "://")
	at := strings.LastIndex(rawURL, "@")
	if i < 0 {
		// No scheme: everything before the last "@" may be a secret.
		if at < 0 {
			return "", "", "", "", false
		}
		return "", "", rawURL[:at], rawURL[at+1:], true
	}
	start := i + len("://")
	if at < start {
		return "", "", "", "", false
	}
	user, pw, ok = strings.Cut(rawURL[start:at], ":")
	if !ok {
		return "", "", "", "", false
	}
	return rawURL[:start], user, pw, rawURL[at+1:], true
}

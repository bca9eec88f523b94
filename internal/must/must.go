// Package must holds the one helper the repository's tests, benchmarks and
// tools share for a constructor called with options that cannot fail.
package must

// Store is a store constructor's result (NewClaims, NewMemoryRecords,
// NewCoalescer, ...) when its options cannot fail: an error here is a broken
// test or tool, and Store panics with it.
func Store[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}

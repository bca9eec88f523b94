package main

// mustStore is a store constructor's result: the options benchcmp passes
// cannot fail, so an error is a bug in benchcmp.
func mustStore[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}

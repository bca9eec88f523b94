package store_test

// mustStore is a store constructor's result, for options that cannot fail:
// a constructor's error here is a broken test.
func mustStore[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}

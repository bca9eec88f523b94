package store

import "time"

// SetBatchDelay sets how long c's gathered requests that queue behind a call
// in flight wait for more (batchDelay in production), for the tests of
// package store_test; before c is used.
func SetBatchDelay(c *Claims, d time.Duration) { c.gather.delay = d }

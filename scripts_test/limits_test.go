package scripts_test

// The stores' input limits these tests go past (the scripts' headers state
// them).
const (
	maxStatusLen    = 64  // a record's status, bytes
	maxMessageIDLen = 256 // an outbox message id, bytes
)

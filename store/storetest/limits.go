package storetest

// The stores' input limits the suites test at and past (the store package
// documents them where each argument is taken).
const (
	maxStatusLen    = 64   // a record's status, bytes
	maxTokenLen     = 256  // an owner token, bytes
	maxMessageIDLen = 256  // an outbox message id, bytes
	maxAppendMany   = 1000 // messages in one AppendMany
)

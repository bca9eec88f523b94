package kafka

// SetTestHookStarted sets the hook pipeline runs after a record's Do has
// started and before it looks at its end; nil removes it.
func SetTestHookStarted(f func()) { testHookStarted = f }

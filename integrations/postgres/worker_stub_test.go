package postgres_test

const workerEnv = "REDISONCE_PGINBOX_WORKER"

func runWorker() error { return nil }

module github.com/redisonce/redisonce

go 1.26

require (
	github.com/google/go-cmp v0.7.0
	github.com/redis/rueidis v1.0.79
	github.com/redis/rueidis/mock v1.0.79
	go.uber.org/mock v0.6.0
)

require golang.org/x/sys v0.47.0 // indirect

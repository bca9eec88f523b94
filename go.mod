module github.com/redisonce/redisonce

go 1.26

require (
	github.com/google/go-cmp v0.7.0
	github.com/redis/rueidis v1.0.79
)

require golang.org/x/sys v0.47.0 // indirect

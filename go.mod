module github.com/redisonce/redisonce

go 1.26

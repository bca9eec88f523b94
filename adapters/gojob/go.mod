module github.com/redisonce/redisonce/adapters/gojob

go 1.26

require (
	github.com/goliatone/go-job v0.19.0
	github.com/redis/rueidis v1.0.79
	github.com/redisonce/redisonce v0.1.0
	github.com/stretchr/testify v1.10.0
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

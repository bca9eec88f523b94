package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The claims workload: every call claims fresh ids (each one is created) with a
// one-hour dedupe window, under the default prefix.
const (
	claimTTL    = time.Hour
	claimTTLms  = "3600000"
	claimPrefix = store.DefaultClaimsPrefix
	batchSize   = 100
)

// minimalClaim is the minimal script doing what claim.lua does in Redis.
const minimalClaim = `return redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[1])`

var errNotCreated = errors.New("claim did not create the key")

func opClaim() *operation {
	return &operation{
		name:  "Claim",
		batch: 1,
		about: "claim one fresh id (created), TTL 1h",
		variants: []variant{
			{name: "redisonce Claims.Claim", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				s := must.Store(store.NewClaims(rc, store.WithTTL(claimTTL)))
				return func(ctx context.Context, i int) error {
					ok, err := s.Claim(ctx, e.ids[i])
					if err == nil && !ok {
						err = errNotCreated
					}
					return err
				}, nil
			}},
			{name: "rueidis SET NX PX", role: roleRaw, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				return func(ctx context.Context, i int) error {
					return wantOK(rc.Do(ctx, rc.B().Set().Key(claimPrefix+e.ids[i]).Value("1").Nx().PxMilliseconds(claimTTL.Milliseconds()).Build()))
				}, nil
			}},
			{name: "rueidis Lua.Exec minimal script", role: roleMinimal, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScript(minimalClaim)
				return func(ctx context.Context, i int) error {
					return wantOK(lua.Exec(ctx, rc, []string{claimPrefix + e.ids[i]}, []string{claimTTLms, "1"}))
				}, nil
			}},
			{name: "go-redis SetNX", role: roleSetNX, setup: func(_ context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				return func(ctx context.Context, i int) error {
					ok, err := e.gr.SetNX(ctx, claimPrefix+e.ids[i], 1, claimTTL).Result()
					if err == nil && !ok {
						err = errNotCreated
					}
					return err
				}, nil
			}},
			{name: "go-redis Script.Run minimal script", role: roleOther, setup: func(_ context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				script := redis.NewScript(minimalClaim)
				return func(ctx context.Context, i int) error {
					v, err := script.Run(ctx, e.gr, []string{claimPrefix + e.ids[i]}, claimTTL.Milliseconds(), 1).Text()
					if err == nil && v != "OK" {
						err = fmt.Errorf("reply %q", v)
					}
					return err
				}, nil
			}},
		},
	}
}

func opClaimMany() *operation {
	return &operation{
		name:  "ClaimMany",
		batch: batchSize,
		about: "claim 100 fresh ids in one call (all created), TTL 1h; ops = ids",
		variants: []variant{
			{name: "redisonce Claims.ClaimMany", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				s := must.Store(store.NewClaims(rc, store.WithTTL(claimTTL)))
				return func(ctx context.Context, first int) error {
					got, err := s.ClaimMany(ctx, e.ids[first:first+batchSize])
					if err != nil {
						return err
					}
					for _, ok := range got {
						if !ok {
							return errNotCreated
						}
					}
					return nil
				}, nil
			}},
			{name: "rueidis DoMulti EVALSHA claim.lua (ClaimMany before claim_many)", role: rolePrevious, setup: func(ctx context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				if err := loadScripts(ctx, rc); err != nil {
					return nil, err
				}
				return previousClaimMany(e.ids, rc), nil
			}},
			{name: "rueidis DoMulti EVALSHA minimal", role: roleMinimal, setup: func(ctx context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				sha, err := rc.Do(ctx, rc.B().ScriptLoad().Script(minimalClaim).Build()).ToString()
				if err != nil {
					return nil, err
				}
				return func(ctx context.Context, first int) error {
					cmds := make(rueidis.Commands, 0, batchSize)
					for _, id := range e.ids[first : first+batchSize] {
						cmds = append(cmds, rc.B().Evalsha().Sha1(sha).Numkeys(1).Key(claimPrefix+id).Arg(claimTTLms, "1").Build())
					}
					return wantAllOK(rc.DoMulti(ctx, cmds...))
				}, nil
			}},
			{name: "rueidis DoMulti SET NX PX", role: roleRaw, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				return func(ctx context.Context, first int) error {
					cmds := make(rueidis.Commands, 0, batchSize)
					for _, id := range e.ids[first : first+batchSize] {
						cmds = append(cmds, rc.B().Set().Key(claimPrefix+id).Value("1").Nx().PxMilliseconds(claimTTL.Milliseconds()).Build())
					}
					return wantAllOK(rc.DoMulti(ctx, cmds...))
				}, nil
			}},
			{name: "go-redis Pipelined SetNX", role: roleSetNX, setup: func(_ context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				return func(ctx context.Context, first int) error {
					cmds, err := e.gr.Pipelined(ctx, func(p redis.Pipeliner) error {
						for _, id := range e.ids[first : first+batchSize] {
							p.SetNX(ctx, claimPrefix+id, 1, claimTTL)
						}
						return nil
					})
					if err != nil {
						return err
					}
					for _, c := range cmds {
						if !c.(*redis.BoolCmd).Val() {
							return errNotCreated
						}
					}
					return nil
				}, nil
			}},
			{name: "go-redis Pipelined EvalSha minimal", role: roleOther, setup: func(ctx context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				script := redis.NewScript(minimalClaim)
				if err := script.Load(ctx, e.gr).Err(); err != nil {
					return nil, err
				}
				return func(ctx context.Context, first int) error {
					cmds, err := e.gr.Pipelined(ctx, func(p redis.Pipeliner) error {
						for _, id := range e.ids[first : first+batchSize] {
							script.EvalSha(ctx, p, []string{claimPrefix + id}, claimTTL.Milliseconds(), 1)
						}
						return nil
					})
					if err != nil {
						return err
					}
					for _, c := range cmds {
						if v, _ := c.(*redis.Cmd).Text(); v != "OK" {
							return fmt.Errorf("reply %q", v)
						}
					}
					return nil
				}, nil
			}},
		},
	}
}

// wantOK checks a reply is the simple string OK.
func wantOK(r rueidis.RedisResult) error {
	s, err := r.ToString()
	if err != nil {
		return err
	}
	if s != "OK" {
		return fmt.Errorf("reply %q, want OK", s)
	}
	return nil
}

func wantAllOK(rs []rueidis.RedisResult) error {
	for _, r := range rs {
		if err := wantOK(r); err != nil {
			return err
		}
	}
	return nil
}

// previousClaimMany is ClaimMany as it was before claim_many.lua: one EVALSHA
// of claim.lua per id, pipelined in one DoMulti (the script is loaded by the
// stores' first call; here by loadScripts in the variant's setup).
func previousClaimMany(ids []string, rc rueidis.Client) callFunc {
	sha := scriptSHA("claim")
	return func(ctx context.Context, first int) error {
		cmds := make(rueidis.Commands, 0, batchSize)
		for _, id := range ids[first : first+batchSize] {
			cmds = append(cmds, rc.B().Evalsha().Sha1(sha).Numkeys(1).Key(claimPrefix+id).Arg(claimTTLms, "1").Build())
		}
		for _, r := range rc.DoMulti(ctx, cmds...) {
			n, err := r.AsInt64()
			if err != nil {
				return err
			}
			if n != 1 {
				return errNotCreated
			}
		}
		return nil
	}
}

// scriptSHA is the SHA1 of an embedded script, which the variants that send
// it by hand load first (loadScripts).
func scriptSHA(name string) string {
	s, ok := redisonce.Get(name)
	if !ok {
		panic("no script " + name)
	}
	return s.SHA1
}

// loadScripts SCRIPT LOADs every embedded script on c (every node).
func loadScripts(ctx context.Context, c rueidis.Client) error {
	for _, s := range redisonce.All() {
		for _, n := range c.Nodes() {
			if err := n.Do(ctx, n.B().ScriptLoad().Script(s.Source).Build()).Error(); err != nil {
				return err
			}
		}
	}
	return nil
}

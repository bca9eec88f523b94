package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
	"go.uber.org/mock/gomock"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The reply parsers, table-tested through the public API on a rueidis mock
// client (github.com/redis/rueidis/mock): every store call that parses a
// script's reply is fed well-formed replies (the value must come out right)
// and malformed ones (ErrUnexpectedReply, never a panic). The scripts' real
// replies are tested against real Redis in scripts_test; here the shapes a
// script never sends are.

// replyOp is one public call whose script reply is parsed.
type replyOp struct {
	name string
	// run calls the store on c; it returns what the call returned, for cmp.
	run func(ctx context.Context, c rueidis.Client) (any, error)
	// ok are well-formed replies and the value run returns for each.
	ok []replyWant
	// bad are malformed replies: each must fail with ErrUnexpectedReply.
	bad []rueidis.RedisMessage
	// nilOK: a nil reply is well-formed (in ok); for the others it is bad.
	nilOK bool
}

type replyWant struct {
	reply rueidis.RedisMessage
	want  any
}

var (
	i64  = mock.RedisInt64
	str  = mock.RedisString
	blob = mock.RedisBlobString
	arr  = mock.RedisArray
)

// record is a record reply (get.lua, update.lua): status, payload, created_ms,
// updated_ms, expires_ms, lease_ms, fence, fp, token.
func record(status, payload string, created, updated, expires, lease int64, fence, fp, token string) []rueidis.RedisMessage {
	return []rueidis.RedisMessage{str(status), blob(payload), i64(created), i64(updated), i64(expires), i64(lease), str(fence), str(fp), str(token)}
}

// shapes are replies of every RESP type that fit no script's reply; every
// parser must turn each into an error, never a panic.
func shapes() []rueidis.RedisMessage {
	return []rueidis.RedisMessage{
		str("x"), blob(""), mock.RedisFloat64(1.5), mock.RedisBool(true),
		mock.RedisMap(map[string]rueidis.RedisMessage{"a": i64(1)}),
		arr(arr()), arr(mock.RedisNil(), mock.RedisNil(), mock.RedisNil()),
	}
}

func replyOps() []replyOp {
	ms := func(v int64) time.Time { return time.UnixMilli(v).UTC() }
	recOK := record("completed", "result", 1000, 2000, 0, 0, "3", "fp", "")
	recWant := store.Record{Key: "k", Status: store.StatusCompleted, Payload: []byte("result"),
		CreatedAt: ms(1000), UpdatedAt: ms(2000), Fence: 3, Fingerprint: "fp"}
	acquired := append([]rueidis.RedisMessage{i64(1)}, record("pending", "", 1000, 1000, 5000, 1500, "1", "", "tok")...)
	takenOver := append([]rueidis.RedisMessage{i64(2)}, record("pending", "", 1000, 3000, 5000, 4500, "9007199254740993", "", "tok")...)
	notAcquired := append([]rueidis.RedisMessage{i64(0)}, recOK...)
	badRecords := func(prefix ...rueidis.RedisMessage) []rueidis.RedisMessage {
		with := func(i int, m rueidis.RedisMessage) rueidis.RedisMessage {
			r := record("completed", "", 1, 1, 0, 0, "1", "", "")
			r[i] = m
			return arr(append(append([]rueidis.RedisMessage{}, prefix...), r...)...)
		}
		short := record("completed", "", 1, 1, 0, 0, "1", "", "")[:8]
		return []rueidis.RedisMessage{
			i64(1), arr(), arr(append(append([]rueidis.RedisMessage{}, prefix...), short...)...),
			with(0, str("")),                     // empty status
			with(0, arr()),                       // status not a string
			with(2, i64(-1)),                     // negative time
			with(3, str("soon")),                 // time not a number
			with(4, mock.RedisNil()),             // time missing
			with(6, str("-1")),                   // fence not a uint64
			with(6, str("99999999999999999999")), // fence over uint64
			with(7, arr()),                       // fingerprint not a string
		}
	}
	return []replyOp{
		{
			name: "Claims.Claim",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return must.Store(store.NewClaims(c)).Claim(ctx, "id")
			},
			ok:  []replyWant{{i64(1), true}, {i64(0), false}, {i64(-1), false}, {i64(-29870), false}},
			bad: []rueidis.RedisMessage{str("1"), arr(i64(1))},
		},
		{
			name: "Claims.ClaimMany",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return must.Store(store.NewClaims(c)).ClaimMany(ctx, []string{"a"})
			},
			ok:  []replyWant{{i64(1), []bool{true}}, {i64(0), []bool{false}}, {i64(-1), []bool{false}}, {i64(-29870), []bool{false}}},
			bad: []rueidis.RedisMessage{str("1"), arr(i64(1))},
		},
		{
			// Two ids: one claim_many.lua call, one integer per id.
			name: "Claims.ClaimMany/batch",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return must.Store(store.NewClaims(c)).ClaimMany(ctx, []string{"a", "b"})
			},
			ok: []replyWant{{arr(i64(1), i64(0)), []bool{true, false}}, {arr(i64(-1), i64(1)), []bool{false, true}}},
			bad: []rueidis.RedisMessage{i64(1), arr(i64(1)), arr(i64(1), i64(0), i64(1)), arr(str("1"), i64(1)),
				arr(i64(2), i64(0))},
		},
		{
			name: "Claims.SeenMany",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return must.Store(store.NewClaims(c)).SeenMany(ctx, []string{"a", "b"})
			},
			ok:  []replyWant{{arr(i64(1), i64(0)), []bool{true, false}}},
			bad: []rueidis.RedisMessage{i64(1), arr(i64(1)), arr(i64(-1), i64(0)), arr(str("1"), i64(1))},
		},
		{
			// Do's claim: in flight carries the ms left on the holder's lease.
			name: "Claims.Do",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				ran, err := must.Store(store.NewClaims(c)).Do(ctx, "id", time.Second, func(context.Context) error { return nil })
				if d, ok := store.RetryAfter(err); ok && errors.Is(err, store.ErrInFlight) {
					return []any{ran, d}, nil
				}
				return []any{ran, time.Duration(0)}, err
			},
			ok: []replyWant{{i64(0), []any{false, time.Duration(0)}}, {i64(-1), []any{false, time.Millisecond}},
				{i64(-29870), []any{false, 29870 * time.Millisecond}}},
			// A lease won answers its fence (a decimal uint64 above 0), never 1.
			bad: []rueidis.RedisMessage{i64(1), str("0"), str("-5"), str("1e18"), str("18446744073709551616"), arr(i64(-1))},
		},
		{
			name: "Claims.Seen",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return must.Store(store.NewClaims(c)).Seen(ctx, "id")
			},
			ok:  []replyWant{{i64(1), true}, {i64(0), false}},
			bad: []rueidis.RedisMessage{str("1"), arr()},
		},
		{
			name: "Claims.Forget",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return nil, must.Store(store.NewClaims(c)).Forget(ctx, "id")
			},
			ok:  []replyWant{{i64(1), nil}, {i64(0), nil}},
			bad: []rueidis.RedisMessage{str("OK")},
		},
		{
			name: "Outbox.AppendWithID",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return must.Store(store.NewOutbox(c)).AppendWithID(ctx, "conn", "m1", []byte("p"))
			},
			ok: []replyWant{
				{arr(i64(7), i64(1700000000000000), i64(1)), store.Appended{ID: "m1", Seq: 7, Epoch: 1700000000000000, Created: true}},
				{arr(i64(7), str("1700000000000000"), i64(0)), store.Appended{ID: "m1", Seq: 7, Epoch: 1700000000000000}},
			},
			bad: []rueidis.RedisMessage{
				i64(1), arr(), arr(i64(1), i64(2)), arr(i64(1), i64(2), i64(1), i64(0)),
				arr(i64(0), i64(2), i64(1)),  // seq 0
				arr(i64(1), i64(0), i64(1)),  // epoch 0
				arr(i64(1), i64(2), i64(2)),  // created not 0/1
				arr(i64(-1), i64(2), i64(1)), // negative seq
				arr(str("x"), i64(2), i64(1)),
				arr(arr(), i64(2), i64(1)),
			},
		},
		{
			name: "Outbox.Tail",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return must.Store(store.NewOutbox(c)).Tail(ctx, "conn")
			},
			ok: []replyWant{
				{arr(), store.Tail{}},
				{arr(i64(5), str("3")), store.Tail{Epoch: 5, Generation: 3}},
				{arr(str("5"), str("0"), str("b"), blob("2:x:y"), str("a"), blob("1:")),
					store.Tail{Epoch: 5, Messages: []store.Message{{ID: "a", Seq: 1, Payload: []byte{}}, {ID: "b", Seq: 2, Payload: []byte("x:y")}}}},
			},
			bad: []rueidis.RedisMessage{
				i64(1), arr(i64(5)), arr(i64(5), i64(0), str("a")),
				arr(i64(0), i64(0)),                          // epoch 0
				arr(i64(5), i64(-1)),                         // negative generation
				arr(i64(5), i64(0), str("_seq"), str("1:x")), // reserved field as an id
				arr(i64(5), i64(0), str(""), str("1:x")),     // empty id
				arr(i64(5), i64(0), str("a"), str("x")),      // no "<seq>:"
				arr(i64(5), i64(0), str("a"), str("0:x")),    // seq 0
				arr(i64(5), i64(0), str("a"), str("z:x")),    // seq not a number
				arr(i64(5), i64(0), str("a"), i64(1)),        // value not a string
				arr(i64(5), i64(0), arr(), str("1:x")),       // id not a string
			},
		},
		{
			name: "Outbox.AckMany",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return must.Store(store.NewOutbox(c)).AckMany(ctx, "conn", []string{"a", "b"}, 1)
			},
			ok:  []replyWant{{i64(0), 0}, {i64(2), 2}},
			bad: []rueidis.RedisMessage{i64(3), i64(-1), str("2"), arr()},
		},
		{
			name: "Outbox.AdvanceGeneration",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return nil, must.Store(store.NewOutbox(c)).AdvanceGeneration(ctx, "conn", 2)
			},
			ok:  []replyWant{{i64(0), nil}, {i64(1), nil}},
			bad: []rueidis.RedisMessage{i64(2), i64(-1), str("1")},
		},
		{
			name: "Outbox.DropConn",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return nil, must.Store(store.NewOutbox(c)).DropConn(ctx, "conn")
			},
			ok:  []replyWant{{i64(0), nil}, {i64(1), nil}},
			bad: []rueidis.RedisMessage{str("1")},
		},
		{
			name: "Records.AcquireWith",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				rec, ok, err := must.Store(store.NewRecords(c)).AcquireWith(ctx, "k", store.AcquireOptions{Lease: time.Second})
				return fmt.Sprint(ok, " ", rec.Status, " ", rec.Token, " ", rec.Fence), err
			},
			ok: []replyWant{
				{arr(acquired...), "true pending tok 1"},
				{arr(notAcquired...), "false completed  3"},
				{arr(takenOver...), "true pending tok 9007199254740993"},
			},
			bad: append(badRecords(i64(1)),
				arr(append([]rueidis.RedisMessage{i64(3)}, recOK...)...),                                             // flag not 0, 1 or 2
				arr(append([]rueidis.RedisMessage{i64(2)}, recOK...)...),                                             // taken over without a token
				arr(append([]rueidis.RedisMessage{i64(1)}, record("pending", "", 1, 1, 0, 0, "0", "", "tok")...)...), // fence 0
				arr(append([]rueidis.RedisMessage{str("1")}, recOK...)...),                                           // flag not an integer
				arr(append([]rueidis.RedisMessage{i64(1)}, recOK...)...),                                             // acquired without a token
				arr(append([]rueidis.RedisMessage{i64(0)}, acquired[1:]...)...),                                      // not acquired with a token
			),
		},
		{
			name: "Records.Get",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				rec, ok, err := must.Store(store.NewRecords(c)).Get(ctx, "k")
				return fmt.Sprintf("%v %+v", ok, rec), err
			},
			ok: []replyWant{
				{arr(recOK...), fmt.Sprintf("%v %+v", true, recWant)},
				{mock.RedisNil(), fmt.Sprintf("%v %+v", false, store.Record{})},
			},
			nilOK: true,
			bad:   badRecords(),
		},
		{
			name: "Records.Update",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				st := store.StatusCompleted
				return nil, must.Store(store.NewRecords(c)).Update(ctx, "k", store.Update{Status: &st})
			},
			// update.lua answers 1, or 0 when a past ExpiresAt deleted the record.
			ok:  []replyWant{{i64(1), nil}, {i64(0), nil}},
			bad: append(badRecords()[1:], arr(recOK...), i64(2), i64(-1), str("1")), // [1:]: not i64(1), a good reply here
		},
		{
			name: "Records.DeleteFenced",
			run: func(ctx context.Context, c rueidis.Client) (any, error) {
				return nil, must.Store(store.NewRecords(c)).DeleteFenced(ctx, "k", "tok")
			},
			ok:  []replyWant{{i64(0), nil}, {i64(1), nil}},
			bad: []rueidis.RedisMessage{str("1"), arr()},
		},
	}
}

// runReply runs op on a mock client whose every command answers reply,
// turning a panic into a test failure.
func runReply(t *testing.T, op replyOp, reply rueidis.RedisResult) (got any, err error) {
	t.Helper()
	ctrl := gomock.NewController(t)
	c := mock.NewClient(ctrl)
	c.EXPECT().Do(gomock.Any(), gomock.Any()).Return(reply).AnyTimes()
	c.EXPECT().Nodes().Return(map[string]rueidis.Client{"n": c}).AnyTimes()
	c.EXPECT().Mode().Return(rueidis.ClientModeStandalone).AnyTimes()
	c.EXPECT().DoMulti(gomock.Any(), gomock.Any()).DoAndReturn(func(_ context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
		out := make([]rueidis.RedisResult, len(cmds))
		for i := range out {
			out[i] = reply
		}
		return out
	}).AnyTimes()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panicked on the reply %v: %v", op.name, reply, p)
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return op.run(context.Background(), c)
}

func TestReplyParsers(t *testing.T) {
	for _, op := range replyOps() {
		t.Run(op.name, func(t *testing.T) {
			for _, w := range op.ok {
				got, err := runReply(t, op, mock.Result(w.reply))
				if err != nil {
					t.Errorf("reply %s: %v", w.reply.String(), err)
					continue
				}
				if diff := cmp.Diff(w.want, got); diff != "" {
					t.Errorf("reply %s (-want +got):\n%s", w.reply.String(), diff)
				}
			}
			bad := append(op.bad, shapes()...)
			if !op.nilOK {
				bad = append(bad, mock.RedisNil())
			}
			for _, m := range bad {
				if _, err := runReply(t, op, mock.Result(m)); !errors.Is(err, store.ErrUnexpectedReply) {
					t.Errorf("reply %s: err = %v, want ErrUnexpectedReply", m.String(), err)
				}
			}
		})
	}
}

// TestReplyErrors: a script's error reply maps to its sentinel by its first
// word with the detail kept; WRONGTYPE is ErrUnexpectedReply; a Redis error
// that is no script code, and a connection error, are returned wrapped, with
// the operation and id.
func TestReplyErrors(t *testing.T) {
	cases := []struct {
		reply rueidis.RedisResult
		want  error
		text  string
	}{
		{mock.Result(mock.RedisError("STALE_OWNER 7")), store.ErrStaleOwner, "stale owner: 7"},
		{mock.Result(mock.RedisError("NOT_FOUND")), store.ErrNotFound, "not found"},
		{mock.Result(mock.RedisError("FULL 10")), store.ErrOutboxFull, "outbox full: 10"},
		{mock.Result(mock.RedisError("MISMATCH fingerprint")), store.ErrFingerprintMismatch, "fingerprint mismatch"},
		{mock.Result(mock.RedisError("BADARG ttl_ms")), store.ErrInvalidArgument, "invalid argument: ttl_ms"},
		{mock.Result(mock.RedisError("CORRUPT value")), store.ErrUnexpectedReply, "unexpected reply: value"},
		{mock.Result(mock.RedisError("WRONGTYPE Operation against a key holding the wrong kind of value")), store.ErrUnexpectedReply, "WRONGTYPE"},
		{mock.Result(mock.RedisError("ERR something else")), nil, "something else"},
		{mock.ErrorResult(context.DeadlineExceeded), context.DeadlineExceeded, "deadline"},
	}
	for _, op := range replyOps() {
		for _, tc := range cases {
			_, err := runReply(t, op, tc.reply)
			if err == nil {
				t.Errorf("%s on %v: no error", op.name, tc.reply)
				continue
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("%s on %v: err = %v, want %v", op.name, tc.reply, err, tc.want)
			}
			if !strings.Contains(err.Error(), "redisonce: ") || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("%s on %v: err = %q, want the op, the id and %q", op.name, tc.reply, err, tc.text)
			}
		}
	}
}

// TestTryAgainRetried: a batch call that a cluster refuses with TRYAGAIN (a
// slot being migrated) is sent again until it runs; one that stays refused
// returns the TRYAGAIN error after the retries.
func TestTryAgainRetried(t *testing.T) {
	for _, refusals := range []int{1, 3, 1000} {
		ctrl := gomock.NewController(t)
		c := mock.NewClient(ctrl)
		c.EXPECT().Mode().Return(rueidis.ClientModeStandalone).AnyTimes()
		calls := 0
		c.EXPECT().DoMulti(gomock.Any(), gomock.Any()).DoAndReturn(func(_ context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
			calls++
			r := mock.Result(arr(i64(1), i64(0)))
			if calls <= refusals {
				r = mock.Result(mock.RedisError("TRYAGAIN Multiple keys request during rehashing of slot"))
			}
			return []rueidis.RedisResult{r}
		}).AnyTimes()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		got, err := must.Store(store.NewClaims(c)).ClaimMany(ctx, []string{"a", "b"})
		cancel()
		if refusals < 1000 {
			if err != nil || calls != refusals+1 || !cmp.Equal(got, []bool{true, false}) {
				t.Errorf("%d refusals: got %v, %v after %d calls; want [true false], nil after %d", refusals, got, err, calls, refusals+1)
			}
			continue
		}
		if !strings.Contains(fmt.Sprint(err), "TRYAGAIN") || calls < 3 {
			t.Errorf("refused every time: got %v after %d calls; want the TRYAGAIN error after retries", err, calls)
		}
	}
}

// TestTryAgainRetriedUntilDeadline: a slot migration that takes longer than
// the 3 s bound for a ctx without a deadline (a busy server moving many keys)
// does not fail a batch whose ctx allows more: the TRYAGAIN retries last
// until ctx's deadline.
func TestTryAgainRetriedUntilDeadline(t *testing.T) {
	ctrl := gomock.NewController(t)
	c := mock.NewClient(ctrl)
	c.EXPECT().Mode().Return(rueidis.ClientModeStandalone).AnyTimes()
	start := time.Now()
	calls := 0
	c.EXPECT().DoMulti(gomock.Any(), gomock.Any()).DoAndReturn(func(_ context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
		calls++
		if time.Since(start) < 4*time.Second {
			return []rueidis.RedisResult{mock.Result(mock.RedisError("TRYAGAIN Multiple keys request during rehashing of slot"))}
		}
		return []rueidis.RedisResult{mock.Result(arr(i64(1), i64(0)))}
	}).AnyTimes()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := must.Store(store.NewClaims(c)).ClaimMany(ctx, []string{"a", "b"})
	if err != nil || !cmp.Equal(got, []bool{true, false}) {
		t.Errorf("refused for 4 s with a 30 s ctx: got %v, %v after %d calls in %v; want [true false], nil", got, err, calls, time.Since(start))
	}
}

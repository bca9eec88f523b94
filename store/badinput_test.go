package store_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
	"go.uber.org/mock/gomock"

	"github.com/redisonce/redisonce/store"
)

// No panic on bad input anywhere in the public API. A nil context,
// a nil client, a nil option or a nil fn gives ErrInvalidArgument, and
// nothing reaches Redis. The walk calls EVERY exported method of every store
// (by reflection, so a method added later is walked too).

var (
	ctxType = reflect.TypeFor[context.Context]()
	errType = reflect.TypeFor[error]()
)

// argsFor returns good arguments for m's parameters, ctx as given; a func
// parameter is a function that does nothing and succeeds, or nil when nilFn;
// a batch (slice) parameter is nil when empty.
func argsFor(t *testing.T, m reflect.Method, ctx context.Context, nilFn, empty bool) []reflect.Value {
	mt := m.Type
	var args []reflect.Value
	for i := 1; i < mt.NumIn(); i++ { // 0 is the receiver
		pt := mt.In(i)
		if mt.IsVariadic() && i == mt.NumIn()-1 {
			break
		}
		switch {
		case pt == ctxType:
			if ctx == nil {
				args = append(args, reflect.Zero(pt))
			} else {
				args = append(args, reflect.ValueOf(ctx))
			}
		case pt.Kind() == reflect.String:
			args = append(args, reflect.ValueOf("id-1").Convert(pt))
		case pt == reflect.TypeFor[[]byte]():
			args = append(args, reflect.ValueOf([]byte("payload")))
		case pt.Kind() == reflect.Slice && empty && pt != reflect.TypeFor[[]byte]():
			args = append(args, reflect.Zero(pt)) // an empty batch
		case pt == reflect.TypeFor[[]string]():
			args = append(args, reflect.ValueOf([]string{"id-1", "id-2"}))
		case pt == reflect.TypeFor[time.Duration]():
			args = append(args, reflect.ValueOf(time.Second))
		case pt.Kind() == reflect.Uint64:
			args = append(args, reflect.ValueOf(uint64(1)))
		case pt.Kind() == reflect.Func:
			if nilFn {
				args = append(args, reflect.Zero(pt))
				break
			}
			args = append(args, reflect.MakeFunc(pt, func([]reflect.Value) []reflect.Value {
				out := make([]reflect.Value, pt.NumOut())
				for j := range out {
					out[j] = reflect.Zero(pt.Out(j))
				}
				return out
			}))
		case pt.Kind() == reflect.Slice:
			args = append(args, reflect.MakeSlice(pt, 1, 1))
		case pt.Kind() == reflect.Struct, pt.Kind() == reflect.Interface:
			args = append(args, reflect.Zero(pt))
		default:
			t.Fatalf("%s: no argument for a %s; teach argsFor", m.Name, pt)
		}
	}
	return args
}

// call runs m and returns its error result (nil for none) and a panic.
func call(v reflect.Value, m reflect.Method, args []reflect.Value) (err error, panicked any) {
	defer func() { panicked = recover() }()
	out := v.Method(m.Index).Call(args)
	if n := len(out); n > 0 && out[n-1].Type() == errType && !out[n-1].IsNil() {
		err = out[n-1].Interface().(error)
	}
	return err, nil
}

// hasError says whether m returns an error last.
func hasError(m reflect.Method) bool {
	n := m.Type.NumOut()
	return n > 0 && m.Type.Out(n-1) == errType
}

// countSlices counts m's slice parameters other than []byte.
func countSlices(m reflect.Method) int {
	n := 0
	for i := 1; i < m.Type.NumIn(); i++ {
		if p := m.Type.In(i); p.Kind() == reflect.Slice && p != reflect.TypeFor[[]byte]() {
			n++
		}
	}
	return n
}

func hasParam(m reflect.Method, want func(reflect.Type) bool) bool {
	for i := 1; i < m.Type.NumIn(); i++ {
		if want(m.Type.In(i)) {
			return true
		}
	}
	return false
}

// untouched is a rueidis client that fails the test when anything is sent.
func untouched(t *testing.T) rueidis.Client {
	return mock.NewClient(gomock.NewController(t))
}

func TestBadInputNeverPanics(t *testing.T) {
	type storeCase struct {
		name string
		s    any
		// everyCall: every call gives ErrInvalidArgument (a nil store)
		everyCall bool
	}
	var cases []storeCase
	// A bad option (a nil one, a prefix too long for the keys, one that does
	// not apply to the store) or a nil client fails the constructor, with
	// ErrInvalidArgument and no store.
	longPrefix := store.WithPrefix(strings.Repeat("p", 1025)) // a prefix past its 1024 bytes: keys past redisonce.MaxKeyLen
	for _, opts := range [][]store.Option{{nil}, {store.WithPrefix("p:"), nil}, {longPrefix}} {
		constructors := map[string]func() (any, error){
			"NewClaims":        func() (any, error) { return store.NewClaims(untouched(t), opts...) },
			"NewOutbox":        func() (any, error) { return store.NewOutbox(untouched(t), opts...) },
			"NewRecords":       func() (any, error) { return store.NewRecords(untouched(t), opts...) },
			"NewMemoryClaims":  func() (any, error) { return store.NewMemoryClaims(opts...) },
			"NewMemoryOutbox":  func() (any, error) { return store.NewMemoryOutbox(opts...) },
			"NewMemoryRecords": func() (any, error) { return store.NewMemoryRecords(opts...) },
			"NewCoalescer": func() (any, error) {
				return store.NewCoalescer(untouched(t), coalesceNop, store.CoalesceOptions{}, opts...)
			},
			"NewMemoryCoalescer": func() (any, error) {
				return store.NewMemoryCoalescer(coalesceNop, store.CoalesceOptions{}, opts...)
			},
		}
		for name, f := range constructors {
			if s, err := f(); !errors.Is(err, store.ErrInvalidArgument) || !reflect.ValueOf(s).IsNil() {
				t.Errorf("%s with %d bad options = %v, %v; want nil, ErrInvalidArgument", name, len(opts), s, err)
			}
		}
	}
	for name, f := range map[string]func() (any, error){
		"NewClaims(nil)":  func() (any, error) { return store.NewClaims(nil) },
		"NewOutbox(nil)":  func() (any, error) { return store.NewOutbox(nil) },
		"NewRecords(nil)": func() (any, error) { return store.NewRecords(nil) },
		"NewCoalescer(nil)": func() (any, error) {
			return store.NewCoalescer(nil, coalesceNop, store.CoalesceOptions{})
		},
		"NewCoalescer(nil fn)": func() (any, error) {
			return store.NewCoalescer(untouched(t), nil, store.CoalesceOptions{})
		},
		"NewMemoryCoalescer(negative lease)": func() (any, error) {
			return store.NewMemoryCoalescer(coalesceNop, store.CoalesceOptions{Lease: -1})
		},
		"NewCoalescer(WithClock)": func() (any, error) {
			return store.NewCoalescer(untouched(t), coalesceNop, store.CoalesceOptions{}, store.WithClock(time.Now))
		},
	} {
		if s, err := f(); !errors.Is(err, store.ErrInvalidArgument) || !reflect.ValueOf(s).IsNil() {
			t.Errorf("%s = %v, %v; want nil, ErrInvalidArgument", name, s, err)
		}
	}
	cases = append(cases,
		storeCase{"Claims", mustStore(store.NewClaims(untouched(t))), false},
		storeCase{"Outbox", mustStore(store.NewOutbox(untouched(t))), false},
		storeCase{"Records", mustStore(store.NewRecords(untouched(t))), false},
		storeCase{"MemoryClaims", mustStore(store.NewMemoryClaims()), false},
		storeCase{"MemoryOutbox", mustStore(store.NewMemoryOutbox()), false},
		storeCase{"MemoryRecords", mustStore(store.NewMemoryRecords()), false},
		storeCase{"Coalescer", mustStore(store.NewCoalescer(untouched(t), coalesceNop, store.CoalesceOptions{})), false},
		storeCase{"MemoryCoalescer", mustStore(store.NewMemoryCoalescer(coalesceNop, store.CoalesceOptions{})), false},
		storeCase{"Batch", mustStore(mustStore(store.NewClaims(untouched(t))).Batch(context.Background(), nil, time.Second)), false},
		storeCase{"MemoryBatch", mustStore(mustStore(store.NewMemoryClaims()).Batch(context.Background(), nil, time.Second)), false},
	)
	// A typed-nil store (var c *store.Claims): every call gives
	// ErrInvalidArgument, Close gives nil. nilReceivers lists every exported
	// pointer type of the package (TestNilReceiversListed checks it).
	for _, s := range nilReceivers {
		cases = append(cases, storeCase{fmt.Sprintf("nil %T", s), s, true})
	}
	walked := 0
	for _, sc := range cases {
		v := reflect.ValueOf(sc.s)
		nilRecv := v.Kind() == reflect.Pointer && v.IsNil()
		for i := 0; i < v.Type().NumMethod(); i++ {
			m := v.Type().Method(i)
			withCtx := hasParam(m, func(p reflect.Type) bool { return p == ctxType })
			withFn := hasParam(m, func(p reflect.Type) bool { return p.Kind() == reflect.Func })
			// A batch is a slice parameter; a variadic one is options
			// (Coalescer.Trigger's per-call modes), not a batch.
			withSlice := hasParam(m, func(p reflect.Type) bool { return p.Kind() == reflect.Slice && p != reflect.TypeFor[[]byte]() }) &&
				!(m.Type.IsVariadic() && m.Type.In(m.Type.NumIn()-1).Kind() == reflect.Slice && countSlices(m) == 1)
			t.Run(sc.name+"."+m.Name, func(t *testing.T) {
				walked++
				type run struct {
					what         string
					ctx          context.Context
					nilFn, empty bool
					want         bool // ErrInvalidArgument expected
				}
				runs := []run{{"good arguments", context.Background(), false, false, sc.everyCall}}
				if withCtx {
					runs = append(runs, run{"a nil context", nil, false, false, true})
				}
				if withFn {
					runs = append(runs, run{"a nil fn", context.Background(), true, false, true})
				}
				if withSlice {
					runs = append(runs,
						run{"an empty batch", context.Background(), false, true, sc.everyCall},
						run{"an empty batch and a nil context", nil, false, true, true})
				}
				for _, r := range runs {
					if !r.want && !r.empty && !strings.HasPrefix(sc.name, "Memory") {
						continue // good arguments on a good Redis store would reach the (untouched) client
					}
					err, p := call(v, m, argsFor(t, m, r.ctx, r.nilFn, r.empty))
					if p != nil {
						t.Fatalf("%s with %s panicked: %v", m.Name, r.what, p)
					}
					if nilRecv && m.Name == "Close" {
						if err != nil {
							t.Errorf("Close on a nil receiver = %v, want nil (nothing to close)", err)
						}
						continue
					}
					if r.want && hasError(m) && m.Name != "Close" && !errors.Is(err, store.ErrInvalidArgument) {
						t.Errorf("%s with %s = %v, want ErrInvalidArgument", m.Name, r.what, err)
					}
				}
			})
		}
	}
	// Each store type is walked three times: on Redis, in memory, and nil.
	want := 0
	for _, s := range nilReceivers {
		want += 3 * reflect.TypeOf(s).NumMethod()
	}
	if walked != want || walked < 60 {
		t.Errorf("walked %d methods, want %d; the stores have more", walked, want)
	}
}

// nilReceivers holds a typed nil of every exported pointer type of package
// store that has exported methods.
var nilReceivers = []any{
	(*store.Claims)(nil),
	(*store.Outbox)(nil),
	(*store.Records)(nil),
	(*store.Coalescer)(nil),
	(*store.Batch)(nil),
}

func coalesceNop(context.Context, string, []byte) error { return nil }

// TestNilReceiversListed reads the package's source: every exported type
// with an exported method on a pointer receiver is in nilReceivers, so a
// type added later is walked by TestBadInputNeverPanics too.
func TestNilReceiversListed(t *testing.T) {
	listed := map[string]bool{}
	for _, s := range nilReceivers {
		listed[reflect.TypeOf(s).Elem().Name()] = true
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !fd.Name.IsExported() {
				continue
			}
			star, ok := fd.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			id, ok := star.X.(*ast.Ident)
			if !ok || !id.IsExported() {
				continue
			}
			found[id.Name] = true
			if !listed[id.Name] {
				t.Errorf("%s: (*%s).%s has a pointer receiver: add (*store.%s)(nil) to nilReceivers", name, id.Name, fd.Name.Name, id.Name)
			}
		}
	}
	if len(found) < len(nilReceivers) {
		t.Errorf("found %d exported pointer types in the source; the scan is broken", len(found))
	}
}

// Functions that take a handler, a context or an error: nil is refused, not
// a panic later.
func TestBadInputFunctions(t *testing.T) {
	if l, ok := store.LeaseFromContext(nil); ok || l != (store.Lease{}) { //nolint:staticcheck // a nil context on purpose
		t.Errorf("LeaseFromContext(nil) = %+v, %v", l, ok)
	}
	// OnExtend on a nil parent gives the nil context back (no panic), so the
	// Do it is passed to refuses it like any nil context, and fn never runs.
	for _, fn := range []func(store.Lease){nil, func(store.Lease) { t.Error("OnExtend's fn ran under a nil context") }} {
		var ctx context.Context
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("OnExtend(nil, fn) panicked: %v", p)
				}
			}()
			ctx = store.OnExtend(nil, fn) //nolint:staticcheck // a nil context on purpose
		}()
		if ctx != nil {
			t.Errorf("OnExtend(nil, fn) = %v, want the nil context back", ctx)
		}
		ran, err := mustStore(store.NewMemoryClaims()).Do(ctx, "m1", time.Second, func(context.Context) error { return nil })
		if ran || !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("Do under OnExtend(nil, fn) = %v, %v; want false, ErrInvalidArgument", ran, err)
		}
	}
	if store.Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
	// Open* refuses a nil option before it connects (nothing listens there).
	for name, open := range map[string]func() error{
		"OpenClaims":  func() error { _, err := store.OpenClaims("redis://127.0.0.1:1", nil); return err },
		"OpenOutbox":  func() error { _, err := store.OpenOutbox("redis://127.0.0.1:1", nil); return err },
		"OpenRecords": func() error { _, err := store.OpenRecords("redis://127.0.0.1:1", nil); return err },
	} {
		if err := open(); !errors.Is(err, store.ErrInvalidArgument) || strings.Contains(err.Error(), "refused") {
			t.Errorf("%s with a nil option = %v, want ErrInvalidArgument before connecting", name, err)
		}
	}
	obs := store.SlogObserver(nil)
	obs.Observe(context.Background(), store.Event{Outcome: store.Outcome("error")}) // no logger: no log, no panic
	if _, err := store.ClientOptions(""); !errors.Is(err, store.ErrInvalidArgument) && err == nil {
		t.Errorf("ClientOptions(\"\") = %v", err)
	}
}

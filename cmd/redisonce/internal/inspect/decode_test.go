package inspect

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/redisonce/redisonce/internal/recordlayout"
)

func TestDecodeClaim(t *testing.T) {
	for _, tc := range []struct {
		value   string
		pttl    int64
		want    Claim
		foreign bool
	}{
		{"1", -1, Claim{Key: "k", State: Processed, TTLms: -1}, false},
		{"1", 5000, Claim{Key: "k", State: Processed, TTLms: 5000}, false},
		{"~tok", 300, Claim{Key: "k", State: InFlight, Token: "tok", TTLms: 300}, false},
		{"done", -1, Claim{Key: "k", State: Processed, Value: "done", TTLms: -1}, false}, // claim.lua: not "~" = processed
		{"", -1, Claim{Key: "k", State: Processed, TTLms: -1}, false},
		{"~", 300, Claim{}, true},
		{"~" + strings.Repeat("x", 257), 300, Claim{}, true},
	} {
		got, err := DecodeClaim("k", tc.value, tc.pttl)
		var f *Foreign
		if tc.foreign != errors.As(err, &f) {
			t.Errorf("DecodeClaim(%q): %v, want foreign %v", tc.value, err, tc.foreign)
			continue
		}
		if !tc.foreign {
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecodeClaim(%q) (-want +got):\n%s", tc.value, diff)
			}
		}
	}
}

func TestDecodeTail(t *testing.T) {
	fields := map[string]string{"_epoch": "1700000000000000", "_gen": "18446744073709551615", "_seq": "7", "_rid": "0123456789abcdef0123456789abcdef01234567",
		"b": "7:second", "a": "6:fi:rst"}
	got, err := DecodeTail("k", fields, -1)
	want := Tail{Key: "k", EpochUs: 1700000000000000, Generation: "18446744073709551615", Seq: 7, TTLms: -1,
		Messages: []Message{{ID: "a", Seq: 6, Size: 6, Preview: `"fi:rst"`}, {ID: "b", Seq: 7, Size: 6, Preview: `"second"`}}}
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("DecodeTail: %v (-want +got):\n%s", err, diff)
	}
	for name, f := range map[string]map[string]string{
		"no _epoch":       {"_gen": "0", "_seq": "1"},
		"no _gen":         {"_epoch": "1", "_seq": "1"},
		"_gen not number": {"_epoch": "1", "_gen": "x"},
		"_seq not number": {"_epoch": "1", "_gen": "0", "_seq": "-1"},
		"value no colon":  {"_epoch": "1", "_gen": "0", "m": "payload"},
		"value bad seq":   {"_epoch": "1", "_gen": "0", "m": "x:payload"},
		"reserved-like":   {"_epoch": "1", "_gen": "0", "_other": "1:p"},
		"just a hash":     {"field": "value"},
	} {
		_, err := DecodeTail("k", f, -1)
		var fe *Foreign
		if !errors.As(err, &fe) {
			t.Errorf("%s: DecodeTail = %v, want a Foreign error", name, err)
		}
	}
}

func TestDecodeRecordValue(t *testing.T) {
	f := recordlayout.Fields{Status: "completed", Payload: "result", CreatedMS: 1000, UpdatedMS: 2000, Fence: "3", FP: "f", Token: "t"}
	v := string(recordlayout.Encode(f))
	want := Record{Key: "k", Status: "completed", CreatedMs: 1000, UpdatedMs: 2000, Fence: "3", Fingerprint: "f", Token: "t",
		Size: 6, Preview: `"result"`}
	got, err := DecodeRecordValue("k", v)
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("DecodeRecordValue: %v (-want +got):\n%s", err, diff)
	}
	// stats reads the header only: the size is the value's, no preview.
	got, err = DecodeRecordHeader("k", v[:len(v)-4], len(v))
	want.Preview = ""
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("DecodeRecordHeader: %v (-want +got):\n%s", err, diff)
	}
	for name, v := range map[string]string{"json": `{"status":"completed"}`, "empty": "", "cut header": v[:20]} {
		_, err := DecodeRecordValue("k", v)
		var fe *Foreign
		if !errors.As(err, &fe) {
			t.Errorf("%s: DecodeRecordValue = %v, want a Foreign error", name, err)
		}
	}
}

func TestPreview(t *testing.T) {
	for in, want := range map[string]string{
		"hello":                       `"hello"`,
		"a\x00b":                      `"a\x00b"`,
		strings.Repeat("x", 41):       `"` + strings.Repeat("x", 40) + `"…`,
		strings.Repeat("é", 30):       `"` + strings.Repeat("é", 20) + `"…`,  // 2 bytes each: cut at 40
		"x" + strings.Repeat("é", 30): `"x` + strings.Repeat("é", 19) + `"…`, // never half a character
	} {
		if got := Preview(in, 40); got != want {
			t.Errorf("Preview(%q) = %s, want %s", in, got, want)
		}
	}
}

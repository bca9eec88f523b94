package recordlayout

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var sample = Fields{Status: "completed", Payload: "bin\x00\xff", CreatedMS: 1796151897773, UpdatedMS: 1796151897876,
	ExpiresMS: 1796238297773, LeaseMS: 0, Fence: "9999999999999999999", FP: "sha256:ab", Token: "0123456789abcdef0123456789abcdef"}

func TestRoundTrip(t *testing.T) {
	v := Encode(sample)
	if string(v[:4]) != Magic {
		t.Fatalf("value starts %q", v[:4])
	}
	got, err := Decode(v)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sample, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if l, _ := Decode(v[:LeaseOffset+8]); l.LeaseMS != 0 {
		t.Errorf("lease at offset %d", LeaseOffset)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := Encode(sample)
	nan := append([]byte{}, good...)
	copy(nan[4:], []byte{0x7f, 0xf8, 0, 0, 0, 0, 0, 1})
	half := append([]byte{}, good...)
	copy(half[12:], []byte{0x3f, 0xe0, 0, 0, 0, 0, 0, 0}) // updated_ms 0.5
	neg := append([]byte{}, good...)
	neg[20] |= 0x80 // expires_ms negative
	for name, v := range map[string][]byte{
		"empty": nil, "json": []byte(`{"status":"completed"}`), "magic only": []byte(Magic),
		"version 2":   append([]byte("ro2 "), good[4:]...),
		"truncated":   good[:40],
		"nan time":    nan,
		"half ms":     half,
		"negative":    neg,
		"fence 0":     Encode(Fields{Status: "pending", Fence: "0"}),
		"fence 01":    Encode(Fields{Status: "pending", Fence: "01"}),
		"fence 20":    Encode(Fields{Status: "pending", Fence: "10000000000000000000"}),
		"status none": Encode(Fields{Fence: "1"}),
		"status 65":   Encode(Fields{Status: string(make([]byte, 65)), Fence: "1"}),
		"fp 257":      Encode(Fields{Status: "p", Fence: "1", FP: string(make([]byte, 257))}),
		"time 2^53":   Encode(Fields{Status: "p", Fence: "1", LeaseMS: 1 << 53}),
	} {
		if _, err := Decode(v); !errors.Is(err, ErrNotRecord) {
			t.Errorf("%s: Decode = %v, want ErrNotRecord", name, err)
		}
	}
}

// FuzzDecode: any value decodes to a valid record that encodes back to the
// very same bytes, or is refused; never a panic.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(sample))
	f.Add(Encode(Fields{Status: "pending", Fence: "1", Token: "t"}))
	f.Add([]byte("ro1 garbage"))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := Decode(v)
		if err != nil {
			if !errors.Is(err, ErrNotRecord) {
				t.Fatalf("error %v is not ErrNotRecord", err)
			}
			return
		}
		if r.Valid() != nil {
			t.Fatalf("decoded an invalid record %+v", r)
		}
		// -0.0 decodes as 0 and re-encodes as +0: compare the fields.
		again, err := Decode(Encode(r))
		if err != nil || again != r {
			t.Fatalf("re-encoding %+v: %+v, %v", r, again, err)
		}
	})
}

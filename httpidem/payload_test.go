package httpidem

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"testing"
)

func TestPayloadRoundTrip(t *testing.T) {
	for _, r := range []response{
		{status: 200, header: http.Header{}},
		{status: 201, header: http.Header{"Content-Type": {"application/json"}, "Link": {"</a>", "</b>"}, "X-Empty": {""}}, body: []byte(`{"a":1}`)},
		{status: 404, header: http.Header{"X-Bin": {"\x00\xff"}}, body: bytes.Repeat([]byte{0, 1, 2}, 1000)},
		{status: 599, header: http.Header{}, body: []byte("x")},
	} {
		p := encode(r)
		if p[0] != payloadVersion {
			t.Errorf("version byte %d", p[0])
		}
		if n := headerLen(r.status, r.header) + len(r.body); n != len(p) {
			t.Errorf("headerLen+body = %d, encoded %d bytes", n, len(p))
		}
		got, err := decode(p)
		if err != nil {
			t.Fatalf("decode(encode(%v)): %v", r, err)
		}
		if got.status != r.status || !reflect.DeepEqual(got.header, r.header) || !bytes.Equal(got.body, r.body) {
			t.Errorf("round trip: got %v, want %v", got, r)
		}
		if !bytes.Equal(encode(got), p) {
			t.Error("encoding is not deterministic")
		}
	}
}

func TestPayloadCorrupt(t *testing.T) {
	good := encode(response{status: 201, header: http.Header{"A": {"b"}}, body: []byte("body")})
	bad := [][]byte{
		nil, {}, {0}, {2, 200, 1, 0}, {1}, {1, 0xff}, {1, 100, 0}, {1, 0xd8, 0x04, 0},
		{1, 0xc8, 0x01}, {1, 0xc8, 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f}, {1, 0xc8, 0x01, 1, 0, 0},
		{1, 0xc8, 0x01, 1, 5, 'a'}, {1, 0xc8, 0x01, 1, 1, 'a', 9, 'b'},
	}
	for i := 1; i < len(good)-len("body"); i++ {
		bad = append(bad, good[:i]) // cut inside the header block
	}
	for _, p := range bad {
		if _, err := decode(p); !errors.Is(err, errCorrupt) {
			t.Errorf("decode(%q) = %v, want errCorrupt", p, err)
		}
	}
}

// FuzzDecode: any bytes decode or fail with errCorrupt, never panic; what
// decodes encodes back to the same bytes' meaning.
func FuzzDecode(f *testing.F) {
	f.Add(encode(response{status: 200, header: http.Header{"A": {"1", "2"}}, body: []byte("x")}))
	f.Add([]byte{1, 0xc8, 0x01, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := decode(p)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("error %v is not errCorrupt", err)
			}
			return
		}
		again, err := decode(encode(r))
		if err != nil || again.status != r.status || !reflect.DeepEqual(again.header, r.header) || !bytes.Equal(again.body, r.body) {
			t.Fatalf("re-encoding %v gave %v, %v", r, again, err)
		}
	})
}

package store

import "testing"

// TestKeySlot: keySlot agrees with CLUSTER KEYSLOT (the figures were read from
// redis-server 7 with cluster-enabled yes; scripts_test checks random keys
// against a live cluster).
func TestKeySlot(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3 (CRC16-XMODEM check value)", got)
	}
	for _, c := range []struct {
		key  string
		slot uint16
	}{
		{"123456789", 12739},
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"foo{}{bar}", 8363},    // empty tag: the whole key
		{"foo{{bar}}zap", 4015}, // tag "{bar"
		{"foo{bar}{zap}", 5061}, // the first tag only
		{"{bar", 4015},          // no closing brace: the whole key
		{"}{x}", 16287},
		{"", 0},
		{"bq:idemp:{t1}a", 8943},
		{"bq:idemp:m42", 5119},
		{"é{ü}", 9552},
		{"a{b", 13340},
	} {
		if got := keySlot(c.key); got != c.slot {
			t.Errorf("keySlot(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
}

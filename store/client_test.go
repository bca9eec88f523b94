package store

import (
	"crypto/tls"
	"testing"
	"time"
)

// TestClientOptionsSentinel: a Sentinel URL gives the sentinels the URL's
// credentials and TLS too, and a topology re-check.
func TestClientOptionsSentinel(t *testing.T) {
	opt, err := ClientOptions("rediss://app:s3cret@sentinel-1:26379?addr=sentinel-2:26379&addr=sentinel-3:26379&master_set=mymaster&dial_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	s := opt.Sentinel
	if s.MasterSet != "mymaster" || len(opt.InitAddress) != 3 || opt.InitAddress[2] != "sentinel-3:26379" {
		t.Errorf("master set %q, sentinels %v", s.MasterSet, opt.InitAddress)
	}
	if opt.Username != "app" || opt.Password != "s3cret" || s.Username != "app" || s.Password != "s3cret" {
		t.Errorf("master auth %q/%q, sentinel auth %q/%q; want app/s3cret for both", opt.Username, opt.Password, s.Username, s.Password)
	}
	if s.TLSConfig == nil || s.TLSConfig.MinVersion != tls.VersionTLS12 {
		t.Errorf("sentinel TLS %+v, want the URL's (rediss://)", s.TLSConfig)
	}
	if s.Dialer.Timeout != 3*time.Second || s.TopologyRefreshInterval != 5*time.Second {
		t.Errorf("sentinel dial timeout %v, topology refresh %v; want 3s, 5s", s.Dialer.Timeout, s.TopologyRefreshInterval)
	}

	// Without master_set nothing changes for the sentinels.
	opt, err = ClientOptions("redis://:pw@host:6379")
	if err != nil {
		t.Fatal(err)
	}
	if opt.Sentinel.Password != "" || opt.Sentinel.TopologyRefreshInterval != 0 {
		t.Errorf("a plain URL set sentinel options: %+v", opt.Sentinel)
	}
}

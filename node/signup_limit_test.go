package node

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
)

// buildSignupFlood builds the hostile client
// simulations/hostile/signupflood into a directory of the test's.
func buildSignupFlood(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "signupflood")
	out, err := exec.Command("go", "build", "-o", bin, "spindle.dev/simulations/hostile/signupflood").CombinedOutput()
	if err != nil {
		t.Fatalf("go build signupflood: %v\n%s", err, out)
	}
	return bin
}

// runSignupFlood runs signupflood, bin, against n for tries names and
// returns how many it signed up, and its report.
func runSignupFlood(t *testing.T, bin string, n *Node, prefix string, tries int) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-node", string(n.DialAddr()), "-n", fmt.Sprint(tries), "-prefix", prefix).CombinedOutput()
	if err != nil {
		t.Fatalf("signupflood: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`signed up (\d+) of`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("signupflood printed:\n%s", out)
	}
	var got int
	fmt.Sscan(string(m[1]), &got)
	return got, string(out)
}

// A hundred fresh identities from one address, each with its own keys and
// peer ID, register no more names than the limits per address, per
// network prefix and in all allow, and are told which limit they met.
func TestSignupFloodFromFreshIdentitiesIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a hostile client")
	}
	bin := buildSignupFlood(t)
	for _, tc := range []struct {
		name   string
		cfg    Config
		invite bool // The cluster runs the invite policy.
		tries  int
		want   int
		why    string
	}{
		{"per address", Config{}, false, 100, DefaultSignupsPerAddr, "too many sign-ups from address 127.0.0.1: at most 20 an hour"},
		{"per prefix", Config{SignupsPerAddr: 1000, SignupsPerPrefix: 30}, false, 50, 30, "too many sign-ups from network 127.0.0.0/24: at most 30 an hour"},
		{"in all", Config{SignupsPerAddr: 1000, SignupsPerPrefix: 1000, Signups: 25}, false, 40, 25, "too many sign-ups through this node: at most 25 an hour in all"},
		{"by invitation", Config{SignupsPerAddr: 1000, SignupsPerPrefix: 1000, Signups: 1000}, true, 100, 0, "the cluster admits new names by invitation"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "-"), func(t *testing.T) {
			cfg := tc.cfg
			cfg.Home, cfg.Writers, cfg.Logger = t.TempDir(), []string{"all"}, testLogger(t)
			cfg.KeyPutLimit = 1000 // Each identity is a new peer anyway.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			if tc.invite {
				op := newKeys(t, "op@example.com")
				for _, ch := range [][2]string{{keylog.ChangeInit, n.VerifierKey()}, {keylog.ChangePolicy, keylog.PolicyInvite}} {
					key := spindle.PublicKey("")
					if ch[0] == keylog.ChangeInit {
						key = op.PublicKey()
					}
					if resp, err := call(t, n, false, &wiretest.Request{Method: wire.KeyChange, Data: change(t, op, status(t, n), ch[0], ch[1], key)}); err != nil || resp.Err != nil {
						t.Fatalf("%s: %v %v", ch[0], err, resp)
					}
				}
			}
			start := time.Now()
			got, out := runSignupFlood(t, bin, n, "flood", tc.tries)
			if got != tc.want {
				t.Errorf("%d fresh identities signed up %d names, want %d:\n%s", tc.tries, got, tc.want, out)
			}
			if !strings.Contains(out, tc.why) {
				t.Errorf("the refusals do not say %q:\n%s", tc.why, out)
			}
			t.Logf("%s: %d of %d in %v\n%s", tc.name, got, tc.tries, time.Since(start).Round(time.Millisecond), out)
		})
	}
}

// The limits count per address, per /24 or /48 and in all, each name
// once, and the error names the limit met.
func TestSignupLimits(t *testing.T) {
	now := time.Unix(1e9, 0)
	l := newSignupLimits(2, 3, 6)
	for _, tc := range []struct {
		src, err string
	}{
		{"10.0.0.1", ""},
		{"10.0.0.1", ""},
		{"10.0.0.1", "from address 10.0.0.1: at most 2"},
		{"10.0.0.2", ""},
		{"10.0.0.3", "from network 10.0.0.0/24: at most 3"},
		{"::ffff:10.0.0.4", "from network 10.0.0.0/24"},
		{"2001:db8:1:2::1", ""},
		{"2001:db8:1:3::1", ""},
		{"2001:db8:1:4::1", ""},
		{"2001:db8:1:5::1", "from network 2001:db8:1::/48: at most 3"},
		{"2001:db8:2::1", "too many sign-ups through this node: at most 6 an hour in all"},
		{"", "through this node"},
	} {
		err := l.allow(tc.src, now)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("sign-up from %q: %v, want %q", tc.src, err, tc.err)
		}
	}
	if err := l.allow("10.0.0.1", now.Add(signupWindow)); err != nil {
		t.Errorf("an hour later: %v", err)
	}
}

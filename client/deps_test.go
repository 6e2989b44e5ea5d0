package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The client links no server: what a user's spin runs checks the key
// cluster's and the dir hosts' answers with pure packages (keyraft/keylog,
// dirlog) and reaches its node through p2p's streams, without the Raft
// cluster, its stores or the DHT.
func TestClientImportsNoServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "spindle.dev/client/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	forbidden := []string{
		"github.com/hashicorp/raft",
		"github.com/hashicorp/raft-boltdb",
		"go.etcd.io/bbolt",
		"github.com/libp2p/go-libp2p-kad-dht",
		"spindle.dev/node",
		"spindle.dev/keyraft",
		"spindle.dev/dirlog/host",
		"spindle.dev/blocks/replica",
		"spindle.dev/blocks/disk",
		"spindle.dev/blocks/lease",
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") && !allowedUnder(d) {
				t.Errorf("the client links %s (a server's package, under %s)", d, f)
			}
		}
	}
}

// allowedUnder reports whether pkg, below a forbidden path, is one the
// client may link: the protocol and content types it shares with the
// node, and the key records and proofs it checks.
func allowedUnder(pkg string) bool {
	switch pkg {
	case "spindle.dev/node/wire", "spindle.dev/node/media", "spindle.dev/keyraft/keylog":
		return true
	}
	return false
}

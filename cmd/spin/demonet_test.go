package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// spin demo -network runs three real nodes in this process: bob reads
// ann's file through C before and after A, her sequencer, goes off; her
// write waits for A and says what to run; after the failover her writes
// go through B and bob reads them.
func TestDemoNetwork(t *testing.T) {
	if testing.Short() || runNode == nil {
		t.Skip("starts three nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errs syncBuffer
	st := &State{Stdout: &out, Stderr: &errs, NewClient: dialClient, Trust: trustCluster, Context: ctx}
	if code := run([]string{"demo", "-network"}, st); code != 0 {
		t.Fatalf("demo -network: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
	got := out.String()
	order := []string{
		"A$ spin node -home $DEMO/ann/spin/node",
		"ann$ spin key init\n",
		"B$ spin node -home $DEMO/cat/spin/node -listen /ip4/127.0.0.1/tcp/0 -writers all -keyserver $A &\n",
		"ann$ spin key admit $CAT\n",
		"cat$ spin key join\n    joined:",
		"bob$ spin key join\n    joined:",
		"ann$ spin user -dirs $A,$B\n",
		"bob$ spin get ann@example.com/shared/plans.txt\n    Meet at noon by the river.\n",
		"log:                ann@example.com: mirror, head",
		"A$ ^C\n",
		"bob$ spin get ann@example.com/shared/plans.txt\n    Meet at noon by the river.\n",
		"spin put - @/shared/tickets.txt\n    spin: put: ann@example.com/shared/tickets.txt: the sequencer of ann@example.com's tree",
		"user -failover\n",
		"ann$ spin user -failover\n",
		"bob$ spin get ann@example.com/shared/tickets.txt\n    Two tickets, platform 4.\n",
	}
	at := 0
	for _, want := range order {
		i := strings.Index(got[at:], want)
		if i < 0 {
			t.Fatalf("demo output lacks, after what came before, %q:\n%s", want, got)
		}
		at += i + len(want)
	}
	if errs.String() != "" {
		t.Errorf("demo -network wrote to stderr:\n%s", errs.String())
	}
}

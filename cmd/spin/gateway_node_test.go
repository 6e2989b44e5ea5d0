package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The setup of the report: node G started with -keyserver A -gateway
// hosts nothing; ann's tree is on A. G's gateway serves ann's file that
// all may read, and answers her private file, a folder and a missing
// name with the same 404, byte for byte.
func TestGatewayOnNonHostProcess(t *testing.T) {
	opA, opG, ann := newSpinUser(t), newSpinUser(t), newSpinUser(t)
	a := &clusterNode{op: opA}
	a.start(t)
	g := &clusterNode{op: opG, args: []string{"-keyserver", a.addr, "-gateway", "127.0.0.1:0"}}
	g.start(t)
	nodeLog, err := os.ReadFile(g.log)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(nodeLog), "gateway serving files all may read at ")
	if !ok {
		t.Fatalf("node G says nothing of its gateway:\n%s", nodeLog)
	}
	base, _, _ := strings.Cut(rest, "\n")
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(g.log)
			t.Logf("node G's log:\n%s", log)
		}
	})

	ann.run("init", "-node", a.addr, "ann@example.com")
	ann.run("signup")
	dir := t.TempDir()
	file := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	public := strings.Repeat("a picture of the sea. ", 3000)
	ann.run("mkdir", "@/pub")
	ann.run("mkdir", "@/private")
	ann.run("put", file("pub-access", "r: all\n*: ann@example.com\n"), "@/pub/Access")
	ann.run("put", file("sea.txt", public), "@/pub/sea.txt")
	ann.run("put", file("private-access", "r: bob@example.com\n*: ann@example.com\n"), "@/private/Access")
	ann.run("put", file("diary.txt", "dear diary"), "@/private/diary.txt")

	// get returns the status, and the response as sent without its Date.
	get := func(name string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + name)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Header.Del("Date")
		var b strings.Builder
		resp.Header.Write(&b)
		return resp.StatusCode, resp.Status + "\n" + b.String() + "\n" + string(body)
	}
	code, got := get("ann@example.com/pub/sea.txt")
	if code != 200 || !strings.HasSuffix(got, "\n"+public) {
		t.Fatalf("the gateway on G, for ann's file all may read: status %d; want 200 and the file\n%s", code, got)
	}
	_, missing := get("ann@example.com/pub/nosuch.txt")
	if !strings.HasPrefix(missing, "404 ") {
		t.Fatalf("the gateway on G, for a missing file:\n%s", missing)
	}
	for _, name := range []string{"ann@example.com/private/diary.txt", "ann@example.com/pub/", "ann@example.com/pub/Access"} {
		if _, got := get(name); got != missing {
			t.Errorf("the gateway on G, for %s:\n%s\nand for a missing file:\n%s", name, got, missing)
		}
	}
}

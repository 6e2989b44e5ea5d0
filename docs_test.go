package spindle_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docRef matches a test named in the documentation the way the docs name
// them: `PACKAGE TestName` (or FuzzName, BenchmarkName), the package as a
// path from the module's root, "spindle" for the root itself.
var docRef = regexp.MustCompile("`((?:[a-z0-9]+/)*[a-z0-9]+) ((?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)")

// Every test the README and docs/ name as the evidence for a claim exists
// in the package they say, so that a claim cannot outlive its test when
// code and tests move.
func TestDocsNameRealTests(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "README.md", "simulations/README.md")
	funcs := map[string]map[string]bool{} // By package directory.
	defined := func(dir, name string) bool {
		if funcs[dir] == nil {
			funcs[dir] = map[string]bool{}
			files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
			re := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)\w*)\(`)
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range re.FindAllSubmatch(b, -1) {
					funcs[dir][string(m[1])] = true
				}
			}
		}
		return funcs[dir][name]
	}
	refs := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docRef.FindAllStringSubmatch(string(b), -1) {
			pkg, name := m[1], m[2]
			if pkg == "package" {
				continue // The docs' own description of the form.
			}
			dir := pkg
			if pkg == "spindle" {
				dir = "."
			}
			refs++
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				t.Errorf("%s names %s %s: there is no package %s", doc, pkg, name, pkg)
				continue
			}
			if !defined(dir, name) {
				t.Errorf("%s names %s %s: %s has no such test", doc, pkg, name, strings.TrimPrefix(dir, "./"))
			}
		}
	}
	if refs < 50 {
		t.Errorf("found %d tests named in the docs; the pattern no longer matches how they name them", refs)
	}
}

// The README is for users: at most 200 lines, with a map that links
// every page of docs/ and the simulations' README.
func TestReadmeMapsTheDocs(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > 200 {
		t.Errorf("README.md has %d lines, more than 200: move the detail to docs/", n)
	}
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no pages in docs/")
	}
	for _, p := range append(pages, "simulations/README.md") {
		if !strings.Contains(readme, "("+p+")") {
			t.Errorf("README.md does not link %s", p)
		}
	}
}

package harness

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// Help returns what fn writes to the process's standard error: the usage a
// command's flag sets print for --help.
func Help(t testing.TB, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	func() {
		defer func() { os.Stderr = stderr }()
		fn()
	}()
	w.Close()
	return <-done
}

var (
	helpFlag       = regexp.MustCompile(`(?:^|[\s(\x60"'])--([a-z][a-z0-9-]+)`)
	helpAnnotation = regexp.MustCompile(`\b(?:stickyip\.io|io\.kubernetes\.cri|kubernetes\.io)/[a-z0-9.-]*[a-z0-9]`)
	helpPath       = regexp.MustCompile(`\b(?:deploy|docs|conf)/[A-Za-z0-9._/-]*[A-Za-z0-9_]`)
	helpObject     = regexp.MustCompile(`\bstickyip-[a-z0-9-]*[a-z0-9*]`)
)

// CheckHelp fails t for each name a command's help gives that the code and
// the repository do not have, so that the help tells the truth: a --flag
// that is not in flags (or --help); an annotation or label key
// (stickyip.io/…, io.kubernetes.cri/…; stickyip.io/v1 is the placement
// API's group) that no Go string of contract/ spells; a path under
// deploy/, docs/ or conf/ that does not exist; an object name stickyip-…
// (a trailing * stands for any end) that no manifest of deploy/ and no Go
// string of the project names.
func CheckHelp(t testing.TB, command, help string, flags []string) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	known := knownStrings(t, root)
	flags = append(slices.Compact(slices.Sorted(slices.Values(flags))), "help")
	for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
		if !slices.Contains(flags, m[1]) {
			t.Errorf("%s --help names --%s, which is not one of its flags (%v)", command, m[1], flags)
		}
	}
	for _, a := range helpAnnotation.FindAllString(help, -1) {
		if a != placementv1.SchemeGroupVersion.String() && !strings.Contains(known.contract, `"`+a+`"`) && !strings.HasPrefix(a, "kubernetes.io/") {
			t.Errorf("%s --help names %s, which no constant of contract/ spells", command, a)
		}
	}
	for _, p := range helpPath.FindAllString(help, -1) {
		if _, err := os.Stat(filepath.Join(root, strings.TrimRight(p, "."))); err != nil {
			t.Errorf("%s --help names %s, which does not exist", command, p)
		}
	}
	for _, o := range helpObject.FindAllString(help, -1) {
		name, prefix := strings.CutSuffix(o, "*")
		if !known.hasName(name, prefix) {
			t.Errorf("%s --help names %s, which no manifest of deploy/ and no string of the code names", command, o)
		}
	}
}

// known are the names the repository holds: contract/'s Go source, and
// every name: of deploy/'s manifests and quoted string of the Go code
// (outside tests).
type known struct {
	contract string
	names    []string
}

func knownStrings(t testing.TB, root string) known {
	t.Helper()
	var k known
	quoted := regexp.MustCompile(`"(stickyip-[a-z0-9-]+)`)
	yamlName := regexp.MustCompile(`(?m)^\s*name:\s*"?(stickyip-[a-z0-9-]+)`)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (strings.HasPrefix(rel, ".") && rel != "." || rel == "_output" || rel == "bin") {
			return filepath.SkipDir
		}
		switch {
		case d.IsDir(), strings.HasSuffix(p, "_test.go"):
			return nil
		case strings.HasSuffix(p, ".go"):
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.HasPrefix(rel, "contract"+string(filepath.Separator)) {
				k.contract += string(b)
			}
			for _, m := range quoted.FindAllStringSubmatch(string(b), -1) {
				k.names = append(k.names, m[1])
			}
		case strings.HasPrefix(rel, "deploy"+string(filepath.Separator)) && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".tpl")):
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range yamlName.FindAllStringSubmatch(string(b), -1) {
				k.names = append(k.names, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// hasName reports whether some known name is name, or starts with it
// when prefix, or is a family of names that name is one of (a known name
// that ends in "-", as a shard's prefix does).
func (k known) hasName(name string, prefix bool) bool {
	return slices.ContainsFunc(k.names, func(n string) bool {
		return n == name || prefix && strings.HasPrefix(n, name) || strings.HasSuffix(n, "-") && strings.HasPrefix(name, n)
	})
}

// HelpFlags returns the flags a usage text defines (flag.PrintDefaults'
// lines "  -name …").
func HelpFlags(help string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^\s{2}-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(help, -1) {
		out = append(out, m[1])
	}
	return out
}

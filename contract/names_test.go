package contract

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// dnsCases are names around every rule of an RFC 1123 subdomain: length,
// parts, the characters, the ends of a part.
var dnsCases = []string{
	"", "a", "db-0", "web.v2", "a.b.c", "-a", "a-", "a..b", ".a", "a.", "A", "a_b", "a b", "a/b", "é",
	strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 64) + ".b", "b." + strings.Repeat("a", 200),
	strings.Repeat("a", 253), strings.Repeat("a", 254), strings.Repeat("abc.", 63) + "a", strings.Repeat("ab.", 84) + "a",
	strings.Repeat("a-", 40) + "a", "0", "0.0", "a.-b", "a-.b",
}

// A pod name is what Kubernetes accepts as one: apimachinery's
// IsDNS1123Subdomain, which the API server applies to pod names. The plugin
// cannot link apimachinery (its binary would grow), so contract carries the
// rule and this test holds it to Kubernetes'.
func TestIsDNSSubdomainAsKubernetes(t *testing.T) {
	for _, s := range dnsCases {
		want := len(validation.IsDNS1123Subdomain(s)) == 0
		if got := IsDNSSubdomain(s); got != want {
			t.Errorf("IsDNSSubdomain(%q) (%d characters) = %v, Kubernetes says %v", Clip(s, 80), len(s), got, want)
		}
	}
}

// What the 63-character cap on a part cost a user: a pod whose name has a
// part of 64 characters or more — valid in Kubernetes — had its
// stickyip.io/identity value and its copy's stickyip.io/checkpoint-of
// refused.
func TestLongNamePartAccepted(t *testing.T) {
	name := "db-" + strings.Repeat("x", 61) + ".replica" // 64 characters in its first part
	if _, err := ParseIdentity(name); err != nil {
		t.Errorf("ParseIdentity(%q): %v", name, err)
	}
	if ns, n, err := ParseCheckpointOf("prod/" + name); err != nil || ns != "prod" || n != name {
		t.Errorf("ParseCheckpointOf(prod/%s) = %q, %q, %v", name, ns, n, err)
	}
	// A namespace is a label: 63 characters at most, as Kubernetes holds it.
	if IsNamespace(strings.Repeat("n", 64)) {
		t.Error("a 64-character namespace accepted")
	}
}

func FuzzIsDNSSubdomain(f *testing.F) {
	for _, s := range dnsCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := IsDNSSubdomain(s), len(validation.IsDNS1123Subdomain(s)) == 0; got != want {
			t.Fatalf("IsDNSSubdomain(%q) = %v, Kubernetes says %v", s, got, want)
		}
		if got, want := IsNamespace(s), len(validation.IsDNS1123Label(s)) == 0; got != want {
			t.Fatalf("IsNamespace(%q) = %v, Kubernetes says %v", s, got, want)
		}
	})
}

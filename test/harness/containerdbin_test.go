package harness

import "testing"

func TestParseContainerdVersion(t *testing.T) {
	for _, tc := range []struct {
		out     string
		version string
		major   int
	}{
		{"containerd github.com/containerd/containerd/v2 2.3.7+unknown \n", "2.3.7+unknown", 2},
		{"containerd github.com/containerd/containerd/v2 v2.4.2 abcdef\n", "2.4.2", 2},
		{"containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n", "1.6.20~ds1", 1},
	} {
		v, major, err := parseContainerdVersion(tc.out)
		if err != nil || v != tc.version || major != tc.major {
			t.Errorf("parseContainerdVersion(%q) = %q, %d, %v; want %q, %d", tc.out, v, major, err, tc.version, tc.major)
		}
	}
	for _, bad := range []string{"", "containerd", "containerd x dev"} {
		if v, major, err := parseContainerdVersion(bad); err == nil {
			t.Errorf("parseContainerdVersion(%q) = %q, %d; want an error", bad, v, major)
		}
	}
}

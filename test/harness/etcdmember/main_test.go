package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseJoin(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
		err        string
	}{
		{name: "founder", text: "--initial-cluster=etcd-0=http://10.244.0.2:2380\n--initial-cluster-state=new\n--initial-cluster-token=t1\n",
			want: []string{"--initial-cluster=etcd-0=http://10.244.0.2:2380", "--initial-cluster-state=new", "--initial-cluster-token=t1"}},
		{name: "blank lines and spaces", text: "\n  --initial-cluster-state=existing  \n\n",
			want: []string{"--initial-cluster-state=existing"}},
		{name: "another flag", text: "--initial-cluster-state=new\n--data-dir=/tmp\n", err: `line 2: "--data-dir=/tmp"`},
		{name: "no value", text: "--initial-cluster=\n", err: "line 1"},
		{name: "a flag as a value's prefix", text: "--initial-cluster-statefoo\n", err: "line 1"},
		{name: "empty", text: "\n\n", err: "no flags"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseJoin(tc.text)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parseJoin: %v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("parseJoin = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	dir := t.TempDir()
	data, join := filepath.Join(dir, "data"), filepath.Join(dir, "join")
	etcd := []string{"/usr/local/bin/etcd", "--name=etcd-1"}

	// A new member without a join file waits, then gives up.
	start := time.Now()
	if _, err := command(data, join, 300*time.Millisecond, etcd); err == nil || !strings.Contains(err.Error(), "no join file") {
		t.Fatalf("no join file: %v", err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("gave up before -wait")
	}

	// The join file, written while it waits.
	go func() {
		time.Sleep(300 * time.Millisecond)
		tmp := join + ".tmp"
		_ = os.WriteFile(tmp, []byte("--initial-cluster=etcd-0=http://a:2380,etcd-1=http://b:2380\n--initial-cluster-state=existing\n"), 0o644)
		_ = os.Rename(tmp, join)
	}()
	got, err := command(data, join, 10*time.Second, etcd)
	want := []string{"/usr/local/bin/etcd", "--name=etcd-1", "--data-dir=" + data,
		"--initial-cluster=etcd-0=http://a:2380,etcd-1=http://b:2380", "--initial-cluster-state=existing"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("new member: %q, %v; want %q", got, err, want)
	}

	// A member that joined before starts from its data, whatever the file says.
	if err := os.MkdirAll(filepath.Join(data, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(join, []byte("not a flag\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = command(data, join, time.Second, etcd)
	if want := append(etcd[:2:2], "--data-dir="+data); err != nil || !slices.Equal(got, want) {
		t.Fatalf("joined member: %q, %v; want %q", got, err, want)
	}

	// A bad join file is refused, naming it.
	if _, err := command(filepath.Join(dir, "new"), join, time.Second, etcd); err == nil || !strings.Contains(err.Error(), join) {
		t.Fatalf("bad join file: %v", err)
	}
	if _, err := command("", join, time.Second, etcd); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Fatalf("no -data-dir: %v", err)
	}
}

func FuzzParseJoin(f *testing.F) {
	f.Add("--initial-cluster=etcd-0=http://10.244.0.2:2380\n--initial-cluster-state=new\n")
	f.Add("--initial-cluster-token=x\r\n\n--data-dir=/\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		flags, err := parseJoin(text)
		if err != nil {
			if flags != nil {
				t.Fatalf("flags %q with error %v", flags, err)
			}
			return
		}
		if len(flags) == 0 {
			t.Fatal("no flags and no error")
		}
		for _, fl := range flags {
			if strings.ContainsAny(fl, "\n") || strings.TrimSpace(fl) != fl {
				t.Fatalf("flag %q not one trimmed line", fl)
			}
			ok := false
			for _, p := range joinFlags {
				ok = ok || (strings.HasPrefix(fl, p) && len(fl) > len(p))
			}
			if !ok {
				t.Fatalf("flag %q is not a join flag with a value", fl)
			}
		}
	})
}

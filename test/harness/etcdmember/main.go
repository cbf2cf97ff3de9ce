// Command etcdmember is the entrypoint of the e2e's offline etcd image
// (harness.BuildEtcdImage): it starts one member of an etcd cluster whose
// members know each other by pod IP, as a StatefulSet pod whose IP is known
// only once it runs.
//
//	/etcdmember -data-dir /var/lib/etcd/data -join /var/lib/etcd/join -- \
//	    /usr/local/bin/etcd --name=$(POD_NAME) \
//	    --initial-advertise-peer-urls=http://$(POD_IP):2380 ...
//
// A member whose data directory holds a member (its "member" directory: it
// has joined before) runs etcd with the arguments as given: etcd takes the
// cluster from its own data and ignores the --initial-cluster flags.
//
// A new member waits for its join file, written by whoever founds the
// cluster or adds the member (the e2e: once the pods run, the initial
// cluster naming each member at its pod IP; or, after `member add` of the
// pod's IP through a running member, what the add returned), then runs
// etcd with the file's lines appended to the arguments. Only --initial-cluster,
// --initial-cluster-state and --initial-cluster-token lines are accepted;
// anything else is refused with an error naming the line, and the member
// exits 1 (the kubelet restarts it). A member that waits longer than -wait
// exits 1 too.
//
// etcd is exec'd in place: it is the container's process and gets its
// signals. Nothing else runs in the image (there is no shell).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// joinFlags are the flags a join file may set.
var joinFlags = []string{"--initial-cluster=", "--initial-cluster-state=", "--initial-cluster-token="}

func main() {
	dataDir := flag.String("data-dir", "", "the member's data directory (passed to etcd as --data-dir)")
	join := flag.String("join", "", "the join file a new member waits for")
	wait := flag.Duration("wait", 10*time.Minute, "how long a new member waits for its join file")
	flag.Parse()
	argv, err := command(*dataDir, *join, *wait, flag.Args())
	if err == nil {
		fmt.Fprintf(os.Stderr, "etcdmember: exec %s\n", strings.Join(argv, " "))
		err = syscall.Exec(argv[0], argv, os.Environ())
	}
	fmt.Fprintln(os.Stderr, "etcdmember:", err)
	os.Exit(1)
}

// command returns etcd's command line: etcdArgs with --data-dir, and for a
// new member the join file's flags once it exists.
func command(dataDir, join string, wait time.Duration, etcdArgs []string) ([]string, error) {
	if dataDir == "" || join == "" || len(etcdArgs) == 0 {
		return nil, errors.New("usage: etcdmember -data-dir DIR -join FILE -- ETCD [ARGS...]")
	}
	argv := append(append([]string{}, etcdArgs...), "--data-dir="+dataDir)
	if _, err := os.Stat(filepath.Join(dataDir, "member")); err == nil {
		fmt.Fprintf(os.Stderr, "etcdmember: %s holds a member: starting from it\n", dataDir)
		return argv, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "etcdmember: a new member: waiting up to %s for %s\n", wait, join)
	b, err := waitFile(join, wait)
	if err != nil {
		return nil, err
	}
	flags, err := parseJoin(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", join, err)
	}
	return append(argv, flags...), nil
}

// waitFile returns the content of path once it exists (it is written by a
// rename, so never seen half-written), or an error after wait.
func waitFile(path string, wait time.Duration) ([]byte, error) {
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no join file %s after %s", path, wait)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// parseJoin returns the flags of a join file: one per line, each one of
// joinFlags with a value; blank lines are skipped.
func parseJoin(text string) ([]string, error) {
	var flags []string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		ok := false
		for _, f := range joinFlags {
			if strings.HasPrefix(line, f) && len(line) > len(f) {
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not one of %s followed by a value", i+1, line, strings.Join(joinFlags, ", "))
		}
		flags = append(flags, line)
	}
	if len(flags) == 0 {
		return nil, errors.New("no flags")
	}
	return flags, nil
}

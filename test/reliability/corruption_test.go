//go:build reliability

package reliability

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/contract"
)

// store is a data directory with a database made by the real plugin.
type store struct {
	p       *plugin
	dir     string // data directory
	conf    map[string]any
	netns   string
	created []string // addresses of the pods added by populate
}

func (s *store) db() string   { return filepath.Join(s.dir, dbName) }
func (s *store) lock() string { return filepath.Join(s.dir, lockName) }

// newStore makes a data directory under parent (a fresh temp dir when empty)
// and fills it with a few allocations and a reservation through the plugin.
func newStore(t *testing.T, p *plugin, parent string) *store {
	t.Helper()
	if parent == "" {
		parent = t.TempDir()
	}
	s := &store{p: p, dir: filepath.Join(parent, "data"), netns: goneNetns(t)}
	// The log goes elsewhere so that a read-only or full data directory does
	// not also break logging.
	s.conf = netConf("corrnet", s.dir, filepath.Join(t.TempDir(), "plugin.log"))
	for i := 0; i < 3; i++ {
		o := s.add(t, fmt.Sprintf("pod%d", i), map[string]string{annoDuration: "30"})
		if !o.OK() {
			t.Fatalf("populate: ADD pod%d: %s", i, o.Describe())
		}
		s.created = append(s.created, o.Result.Addrs()...)
	}
	if o := s.del(t, "pod0"); !o.OK() {
		t.Fatalf("populate: DEL pod0: %s", o.Describe())
	}
	p.RequireCheckOK(t, s.dir, "populated store")
	return s
}

func (s *store) call(t *testing.T, command, name string, annotations map[string]string) *outcome {
	t.Helper()
	container := "ctr-" + name
	return s.p.CNI(cniCall{Command: command, ContainerID: container, Netns: s.netns, IfName: "eth0",
		Args: podArgs("default", name, "uid-"+name, container), Stdin: encodeConf(t, withAnnotations(s.conf, annotations))})
}

func (s *store) add(t *testing.T, name string, annotations map[string]string) *outcome {
	return s.call(t, "ADD", name, annotations)
}

func (s *store) del(t *testing.T, name string) *outcome { return s.call(t, "DEL", name, nil) }

// status runs CNI STATUS on the store's network.
func (s *store) status(t *testing.T) *outcome {
	t.Helper()
	return s.p.CNI(cniCall{Command: "STATUS", Stdin: encodeConf(t, s.conf)})
}

func (s *store) gc(t *testing.T) *outcome {
	t.Helper()
	return s.p.CNI(cniCall{Command: "GC", Stdin: encodeConf(t, withValidAttachments(s.conf, nil))})
}

// expectCNIError asserts a clean CNI error with the given code whose text
// mentions every word in mention.
func expectCNIError(t *testing.T, what string, o *outcome, code uint, mention ...string) {
	t.Helper()
	switch {
	case o.Panicked():
		t.Errorf("%s: plugin panicked: %s", what, o.Describe())
	case o.StdoutBad != "":
		t.Errorf("%s: %s: %s", what, o.StdoutBad, o.Describe())
	case o.Err == nil:
		t.Errorf("%s: want CNI error %d, got %s", what, code, o.Describe())
	case o.Err.Code != code:
		t.Errorf("%s: want CNI error %d, got %s", what, code, o.Err)
	default:
		text := strings.ToLower(o.Err.Text())
		for _, m := range mention {
			if !strings.Contains(text, strings.ToLower(m)) {
				t.Errorf("%s: message does not mention %q: %s", what, m, o.Err)
			}
		}
	}
}

// expectUntouched asserts the file is byte for byte what it was, same inode.
func expectUntouched(t *testing.T, path string, before fileState) {
	t.Helper()
	if after := statFile(t, path); after != before {
		t.Errorf("%s was changed: before %v, after %v", path, before, after)
	}
}

// expectCheckExplains asserts `stickyip check` refuses the store (exit 2:
// cannot open), names the file and says what to do.
func expectCheckExplains(t *testing.T, p *plugin, dir string, words ...string) {
	t.Helper()
	o := p.Check(dir)
	out := strings.ToLower(string(o.Stdout) + string(o.Stderr))
	if o.Panicked() {
		t.Errorf("stickyip check panicked: %s", o.Describe())
		return
	}
	if o.ExitCode != 2 {
		t.Errorf("stickyip check: want exit 2 (cannot open), got %s", o.Describe())
	}
	for _, w := range append([]string{filepath.Join(dir, dbName)}, words...) {
		if !strings.Contains(out, strings.ToLower(w)) {
			t.Errorf("stickyip check output does not mention %q: %s", w, clip([]byte(out), 800))
		}
	}
	t.Logf("stickyip check says: %s", strings.TrimSpace(string(o.Stdout)+string(o.Stderr)))
}

// TestCorruption damages the database in several ways (and deletes it under
// its creation mark) and asserts that every CNI command fails with code 102,
// that the damaged file is left exactly as it was (a deleted one is not
// created again), and that the operator tool explains the problem.
func TestCorruption(t *testing.T) {
	p := newPlugin(t)
	f := &figures{}
	damages := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"truncated to half", func(t *testing.T, path string) {
			st, _ := os.Stat(path)
			truncate(t, path, st.Size()/2)
		}},
		{"truncated inside the first page", func(t *testing.T, path string) { truncate(t, path, 100) }},
		{"truncated to zero bytes", func(t *testing.T, path string) { truncate(t, path, 0) }},
		{"random bytes", func(t *testing.T, path string) { writeRandom(t, path, 0, 64*1024, true) }},
		{"both meta pages destroyed", func(t *testing.T, path string) { writeRandom(t, path, 0, 2*pageSize(t, path), false) }},
		{"data pages destroyed", func(t *testing.T, path string) {
			st, _ := os.Stat(path)
			ps := pageSize(t, path)
			writeRandom(t, path, 2*ps, st.Size()-2*ps, false)
		}},
		{"not a stickyip database", func(t *testing.T, path string) { foreignBolt(t, path) }},
		{"schema from the future", func(t *testing.T, path string) { setSchema(t, path, 99) }},
		{"schema zero", func(t *testing.T, path string) { setSchema(t, path, 0) }},
		// Lost, not damaged: the file gone, its creation mark there. No call
		// may start over from an empty store while its sandboxes run.
		{"deleted (its creation mark stays)", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		// Lost too: the data directory removed whole, its creation mark
		// with it, while the runtime's CNI result cache holds an ADD through
		// stickyip with that directory (a sandbox not deleted since).
		{"directory removed whole (a cached ADD names it)", func(t *testing.T, path string) {
			cacheADD(t, "corrnet", filepath.Dir(path))
			if err := os.RemoveAll(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			s := newStore(t, p, "")
			d.damage(t, s.db())
			before := statFile(t, s.db())
			wantCode, words := uint(102), []string{s.db()}
			switch {
			case strings.Contains(d.name, "future"):
				words = append(words, "upgrade")
			case strings.Contains(d.name, "deleted"):
				words = append(words, "this node had a store")
			case strings.Contains(d.name, "removed whole"):
				words = append(words, "this node had one", "CNI result cache")
			}
			for _, op := range []struct {
				name string
				run  func() *outcome
			}{
				{"ADD new pod", func() *outcome { return s.add(t, "newpod", nil) }},
				{"ADD reserved pod", func() *outcome { return s.add(t, "pod0", nil) }},
				{"DEL", func() *outcome { return s.del(t, "pod1") }},
				{"GC", func() *outcome { return s.gc(t) }},
			} {
				o := op.run()
				f.add("calls on damaged stores", 1)
				f.add("result "+o.Kind(), 1)
				expectCNIError(t, d.name+": "+op.name, o, wantCode, words...)
				expectUntouched(t, s.db(), before)
			}
			// STATUS reports the damage to the runtime (the node's network
			// turns not ready) with the code CNI 1.1 gives STATUS.
			o := s.status(t)
			f.add("result "+o.Kind(), 1)
			expectCNIError(t, d.name+": STATUS", o, 50, words...)
			expectUntouched(t, s.db(), before)
			if strings.Contains(d.name, "future") {
				expectCheckExplains(t, p, s.dir, "newer stickyip")
			} else {
				expectCheckExplains(t, p, s.dir, "checkpointd rebuild-store")
			}
			expectUntouched(t, s.db(), before)
			if _, err := os.Stat(s.db() + ".new"); err == nil {
				t.Errorf("a replacement database %s.new was left behind", s.db())
			}
		})
	}
	report(t, "corruption", f)
}

// TestHostileEnvironment covers a read-only data directory, a full disk, a
// store held by a hung process, and odd file types where the store should be.
func TestHostileEnvironment(t *testing.T) {
	p := newPlugin(t)

	t.Run("read-only data dir", func(t *testing.T) {
		s := newStore(t, p, "")
		before := statFile(t, s.db())
		bindReadOnly(t, s.dir)
		o := s.add(t, "newpod", nil)
		expectCNIError(t, "ADD", o, 5, s.dir, "read-only")
		t.Logf("read-only: %v", o.Err)
		expectCNIError(t, "DEL", s.del(t, "pod1"), 5, s.dir, "read-only")
		expectCNIError(t, "STATUS", s.status(t), 50, s.dir, "read-only")
		expectUntouched(t, s.db(), before)
		// The operator can still look at what is stored.
		if es := p.List(t, s.dir); len(es) != len(s.created) {
			t.Errorf("list on a read-only store: %d entries, want %d", len(es), len(s.created))
		}
	})

	t.Run("read-only data dir before the first call", func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "data")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bindReadOnly(t, dir)
		conf := netConf("corrnet", dir, filepath.Join(t.TempDir(), "plugin.log"))
		o := p.CNI(cniCall{Command: "ADD", ContainerID: "c1", Netns: goneNetns(t), IfName: "eth0",
			Args: podArgs("default", "web", "uid-web", "c1"), Stdin: encodeConf(t, conf)})
		expectCNIError(t, "ADD", o, 5, dir)
	})

	t.Run("full disk", func(t *testing.T) {
		mnt := mountTmpfs(t, 1<<20)
		s := newStore(t, p, mnt)
		filler := fillDisk(t, mnt)
		var failed *outcome
		added := 0
		for i := 0; i < 400 && failed == nil; i++ {
			o := s.add(t, fmt.Sprintf("fill%03d", i), map[string]string{annoDuration: "30"})
			if o.OK() {
				added++
				continue
			}
			failed = o
		}
		t.Logf("full disk: %d ADDs succeeded before the first failure", added)
		if failed == nil {
			t.Fatalf("400 ADDs succeeded on a full filesystem; the disk was never reported full")
		}
		expectCNIError(t, "ADD on full disk", failed, 5, "no space")
		expectCNIError(t, "STATUS on full disk", s.status(t), 50, "space")
		t.Logf("full disk: %v", failed.Err)
		entries := p.List(t, s.dir)
		if want := len(s.created) + added; len(entries) != want {
			t.Errorf("after the failed ADD the store lists %d entries, want %d (nothing lost, nothing half-written)", len(entries), want)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		p.RequireCheckOK(t, s.dir, "after freeing the disk")
		if o := s.add(t, "after-full", nil); !o.OK() {
			t.Errorf("ADD after freeing the disk: %s", o.Describe())
		}
		if es := p.List(t, s.dir); len(es) != len(entries)+1 {
			t.Errorf("after freeing the disk: %d entries, want %d", len(es), len(entries)+1)
		}
	})

	t.Run("lock held by a hung process", func(t *testing.T) {
		s := newStore(t, p, "")
		ipamOf(s.conf)["lockTimeout"] = "1s"
		release := holdFlock(t, s.lock())
		for _, op := range []string{"ADD", "DEL"} {
			start := time.Now()
			o := s.call(t, op, "pod1", nil)
			took := time.Since(start)
			expectCNIError(t, op+" with the lock held", o, 11, "lock")
			t.Logf("%s with the lock held: %v after %v", op, o.Err, took.Round(time.Millisecond))
			if took < 900*time.Millisecond || took > 5*time.Second {
				t.Errorf("%s with the lock held returned after %v; want about the 1s lockTimeout", op, took)
			}
		}
		checkStart := time.Now()
		o := p.Check(s.dir)
		t.Logf("stickyip check with the lock held: exit %d after %v: %s", o.ExitCode, time.Since(checkStart).Round(time.Millisecond), strings.TrimSpace(string(o.Stdout)+string(o.Stderr)))
		if time.Since(checkStart) > 30*time.Second || o.TimedOut {
			t.Errorf("stickyip check hangs while the lock is held: %s", o.Describe())
		}
		if o.ExitCode == 0 {
			t.Errorf("stickyip check reports success while it cannot take the lock: %s", o.Describe())
		} else if !strings.Contains(strings.ToLower(string(o.Stdout)+string(o.Stderr)), "lock") {
			t.Errorf("stickyip check does not say the store is locked: %s", o.Describe())
		}
		// A busy store is not a node problem: STATUS answers success.
		if o := s.status(t); !o.OK() {
			t.Errorf("STATUS with the lock held: %s; want success (a held lock must not take the node NotReady)", o.Describe())
		}
		release()
		if o := s.add(t, "after-lock", nil); !o.OK() {
			t.Errorf("ADD after the lock was released: %s", o.Describe())
		}
	})

	t.Run("database file locked by a foreign process", func(t *testing.T) {
		s := newStore(t, p, "")
		holdFlock(t, s.db())
		start := time.Now()
		o := s.add(t, "newpod", nil)
		expectCNIError(t, "ADD with the db flocked", o, 11, s.db())
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("ADD took %v", took)
		}
	})

	t.Run("database path is a directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.MkdirAll(filepath.Join(dir, dbName), 0o755); err != nil {
			t.Fatal(err)
		}
		conf := netConf("corrnet", dir, filepath.Join(t.TempDir(), "plugin.log"))
		o := p.CNI(cniCall{Command: "ADD", ContainerID: "c1", Netns: goneNetns(t), IfName: "eth0",
			Args: podArgs("default", "web", "uid-web", "c1"), Stdin: encodeConf(t, conf)})
		if o.Err == nil || (o.Err.Code != 5 && o.Err.Code != 102) || o.Panicked() {
			t.Errorf("want CNI error 5 or 102, got %s", o.Describe())
		} else if !strings.Contains(o.Err.Text(), dbName) {
			t.Errorf("message does not name %s: %s", dbName, o.Err)
		}
		if st, err := os.Stat(filepath.Join(dir, dbName)); err != nil || !st.IsDir() {
			t.Errorf("the directory in the database's place was removed or replaced")
		}
	})

	t.Run("database path is a FIFO", func(t *testing.T) {
		// A FIFO is where a careless open or read blocks forever.
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		fifo := filepath.Join(dir, dbName)
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		conf := netConf("corrnet", dir, filepath.Join(t.TempDir(), "plugin.log"))
		start := time.Now()
		o := p.CNI(cniCall{Command: "ADD", ContainerID: "c1", Netns: goneNetns(t), IfName: "eth0",
			Args: podArgs("default", "web", "uid-web", "c1"), Stdin: encodeConf(t, conf)})
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("ADD on a FIFO took %v", took)
		}
		if o.Err == nil || (o.Err.Code != 5 && o.Err.Code != 102) || o.Panicked() {
			t.Errorf("want CNI error 5 or 102, got %s", o.Describe())
		}
		if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("the FIFO in the database's place was removed or replaced")
		}
	})

	t.Run("data dir is a file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.WriteFile(dir, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		conf := netConf("corrnet", dir, filepath.Join(t.TempDir(), "plugin.log"))
		o := p.CNI(cniCall{Command: "ADD", ContainerID: "c1", Netns: goneNetns(t), IfName: "eth0",
			Args: podArgs("default", "web", "uid-web", "c1"), Stdin: encodeConf(t, conf)})
		expectCNIError(t, "ADD", o, 5, dir)
	})
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// writeRandom overwrites n bytes at off with random bytes (or writes a whole
// new random file of n bytes when replace is set).
func writeRandom(t *testing.T, path string, off, n int64, replace bool) {
	t.Helper()
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		t.Fatal(err)
	}
	if replace {
		if err := os.WriteFile(path, buf, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(buf, off); err != nil {
		t.Fatal(err)
	}
}

// pageSize reads the page size from a bbolt meta page (offset 24 in the
// first page: page header 16 bytes, magic 4, version 4, then pageSize).
func pageSize(t *testing.T, path string) int64 {
	t.Helper()
	b := make([]byte, 32)
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	ps := int64(binary.LittleEndian.Uint32(b[24:28]))
	if ps < 512 || ps > 65536 {
		t.Fatalf("%s: implausible bbolt page size %d", path, ps)
	}
	return ps
}

// foreignBolt replaces the file with a valid bbolt database that is not a
// stickyip store (no meta/schema).
func foreignBolt(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("someone-else"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
}

// setSchema writes the schema version the way reservation/boltstore marks it:
// bucket "meta", key "schema", uint64 big endian.
func setSchema(t *testing.T, path string, v uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("meta"))
		if b == nil {
			return fmt.Errorf("no meta bucket in %s: has the schema marking changed?", path)
		}
		if len(b.Get([]byte("schema"))) != 8 {
			return fmt.Errorf("no 8-byte meta/schema key in %s: has the schema marking changed?", path)
		}
		val := make([]byte, 8)
		binary.BigEndian.PutUint64(val, v)
		return b.Put([]byte("schema"), val)
	}); err != nil {
		t.Fatal(err)
	}
}

// cacheADD writes, where the runtime's libcni keeps it (the plugin reads
// that default), the result cache file of an ADD of network through
// stickyip with dataDir, as libcni writes it for a sandbox not deleted
// since; it is removed when the test ends.
func cacheADD(t *testing.T, network, dataDir string) {
	t.Helper()
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": network, "type": "bridge",
		"ipam": map[string]any{"type": "stickyip", "dataDir": dataDir}})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("reliability-%x", sha256.Sum256([]byte(dataDir)))[:40]
	body, err := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": id, "config": conf, "ifName": "eth0",
		"networkName": network, "result": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]string{{"address": "10.99.0.2/24"}}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(contract.DefaultCNIResultsDir, network+"-"+id+"-eth0")
	if err := os.MkdirAll(contract.DefaultCNIResultsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
}

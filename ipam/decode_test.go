package ipam

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// netConfCases are network configs as runtimes hand them to the plugin,
// each with whether decodeNetConf decodes it itself (true) or leaves it to
// json.Unmarshal. The shapes a node sends must take the fast path: that is
// what the decoder is for.
var netConfCases = []struct {
	name string
	conf string
	fast bool
}{
	{"bench: bridge, ranges, annotations", `{"cniVersion":"1.0.0","name":"bench-empty","type":"bridge","bridge":"cni0","ipam":{"type":"stickyip","dataDir":"/d","ranges":[[{"subnet":"10.244.0.0/16"}]],"hostLocalDataDir":"/h","logFile":"/l"},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"kubernetes.io/config.seen":"2026-01-01T00:00:00Z","kubernetes.io/config.source":"api"}}}`, true},
	{"flannel's delegate to bridge, with prevResult (DEL)", `{"cniVersion":"0.3.1","name":"cbr0","type":"bridge","hairpinMode":true,"ipMasq":false,"isDefaultGateway":true,"isGateway":true,"mtu":1450,
		"ipam":{"type":"stickyip","dataDir":"/var/lib/cni/stickyip","hostLocalDataDir":"/var/lib/cni/networks","logFile":"/var/log/stickyip.log",
		        "reservation":{"maxDuration":"168h","poolFull":"evict"},"ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]},
		"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"io.kubernetes.cri/reserved-ip-duration":"600"}},
		"prevResult":{"cniVersion":"0.3.1","interfaces":[{"name":"cni0","mac":"aa:bb:cc:dd:ee:ff"}],"ips":[{"version":"4","address":"10.244.1.5/24","gateway":"10.244.1.1","interface":2}],"dns":{}}}`, true},
	{"legacy single range, routes with gw, dual stack", `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"stickyip","subnet":"10.2.0.0/24","rangeStart":"10.2.0.10","rangeEnd":"10.2.0.20","gateway":"10.2.0.254",
		"ranges":[[{"subnet":"fd00::/64","rangeStart":"fd00::10"}],[]],"routes":[{"dst":"0.0.0.0/0","gw":"10.2.0.254"},{"dst":"::/0","gw":""}],
		"resolvConf":"/etc/r","lockTimeout":"3s","holderWait":  "1s" ,"ipsAnnotation":{"namespaces":["a"]},"reservation":{ "maxDuration" : "2h", "reuseDelay":"0s","maxPerNamespace":3 }}}`, true},
	{"requests and capabilities (decoded by encoding/json)", `{"name":"n","ipam":{"ranges":[]},"args":{"cni":{"ips":["10.2.0.7/24"]}},"runtimeConfig":{"ips":["10.2.0.8"],"ipRanges":[[{"subnet":"10.9.0.0/24"}]],"io.kubernetes.cri.pod-annotations":{}}}`, true},
	{"GC's valid attachments", `{"cniVersion":"1.1.0","name":"n","ipam":{"subnet":"10.2.0.0/24"},"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}`, true},
	{"escapes, non-ASCII and invalid UTF-8 in strings", "{\"name\":\"n\\u0041\\/\",\"ipam\":{\"dataDir\":\"/d\\u00e9\\ud83d\\ude00\",\"logFile\":\"/l\xff\xfe\"},\"runtimeConfig\":{\"io.kubernetes.cri.pod-annotations\":{\"k\\\"\":\"v\\n\xc3\"}}}", true},
	{"host bits in a subnet", `{"name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.5/24","gateway":""}]]}}`, true},
	{"unknown keys at every level", `{"name":"n","x":[1,{"y":null}],"ipam":{"z":true,"ranges":[[{"subnet":"10.2.0.0/24","w":-1.5e3}]]},"runtimeConfig":{"portMappings":[{"hostPort":80}]}}`, true},

	{"a key differing in case", `{"name":"n","Name":"m","ipam":{}}`, false},
	{"a key differing in case inside ipam", `{"name":"n","ipam":{"DataDir":"/d"}}`, false},
	{"a Kelvin sign folding to k", "{\"name\":\"n\",\"ipam\":{},\"runtimeConfig\":{\"io.\u212aubernetes.cri.pod-annotations\":{\"a\":\"b\"}}}", false},
	{"a key twice", `{"name":"n","name":"m","ipam":{}}`, false},
	{"ipam twice (json.Unmarshal merges)", `{"name":"n","ipam":{"dataDir":"/a"},"ipam":{"logFile":"/l"}}`, false},
	{"an annotation twice", `{"name":"n","ipam":{},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"a":"1","a":"2"}}}`, false},
	{"null for a string", `{"name":"n","ipam":{"dataDir":null}}`, false},
	{"null ipam", `{"name":"n","ipam":null}`, false},
	{"null route", `{"name":"n","ipam":{"routes":[null]}}`, false},
	{"a number for a string", `{"name":5,"ipam":{}}`, false},
	{"an annotation that is not a string", `{"name":"n","ipam":{},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"a":1}}}`, false},
	{"a bad address", `{"name":"n","ipam":{"rangeStart":"10.2.0.x"}}`, false},
	{"a bad subnet", `{"name":"n","ipam":{"subnet":"10.2.0.0"}}`, false},
	{"a route with an MTU", `{"name":"n","ipam":{"routes":[{"dst":"0.0.0.0/0","mtu":1400}]}}`, false},
	{"not an object", `[{"name":"n"}]`, false},
	{"trailing garbage", `{"name":"n","ipam":{}} x`, false},
	{"not JSON", `{"name":"n",`, false},
	{"empty", ``, false},
}

// TestDecodeNetConf holds decodeNetConf to json.Unmarshal: what it
// decodes is what json.Unmarshal decodes, and it leaves to json.Unmarshal
// what it cannot tell.
func TestDecodeNetConf(t *testing.T) {
	for _, tc := range netConfCases {
		t.Run(tc.name, func(t *testing.T) {
			fast := checkDecodeNetConf(t, []byte(tc.conf))
			if fast != tc.fast {
				t.Fatalf("decodeNetConf took the fast path: %v, want %v", fast, tc.fast)
			}
		})
	}
}

// TestDecodeShippedConfigs: every ipam block the project ships, as bridge
// passes it, takes the fast path and decodes as json.Unmarshal does.
func TestDecodeShippedConfigs(t *testing.T) {
	files, err := filepath.Glob("../conf/*.conflist")
	if err != nil || len(files) == 0 {
		t.Fatalf("no conflists: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Name       string           `json:"name"`
			CNIVersion string           `json:"cniVersion"`
			Plugins    []map[string]any `json:"plugins"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range list.Plugins {
			ipam, ok := p["ipam"].(map[string]any)
			if !ok {
				continue
			}
			if _, ok := ipam["ranges"]; !ok { // flannel fills the ranges and routes of its delegate
				ipam["ranges"] = [][]map[string]string{{{"subnet": "10.244.1.0/24"}}}
				ipam["routes"] = []map[string]string{{"dst": "10.244.0.0/16"}}
			}
			conf, _ := json.Marshal(map[string]any{"cniVersion": list.CNIVersion, "name": list.Name, "type": "bridge", "ipam": ipam,
				"runtimeConfig": map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"a": "b"}}})
			if !checkDecodeNetConf(t, conf) {
				t.Errorf("%s: %s did not take the fast path", filepath.Base(f), conf)
			}
		}
	}
}

// checkDecodeNetConf fails t when decodeNetConf decodes conf otherwise than
// json.Unmarshal does (or decodes what json.Unmarshal refuses), and the same
// for the reservation block; it returns whether decodeNetConf decoded conf.
func checkDecodeNetConf(t *testing.T, conf []byte) bool {
	t.Helper()
	var fast, slow netConf
	ok := decodeNetConf(conf, &fast)
	err := json.Unmarshal(conf, &slow)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("%q: decoded, but json.Unmarshal fails: %v", conf, err)
	}
	if fast.IPAM != nil && slow.IPAM != nil && !reflect.DeepEqual(*fast.IPAM, *slow.IPAM) {
		t.Fatalf("%q: ipam decoded\n%#v\njson.Unmarshal decodes\n%#v", conf, *fast.IPAM, *slow.IPAM)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: decoded\n%#v\njson.Unmarshal decodes\n%#v", conf, fast, slow)
	}
	if fast.IPAM != nil {
		checkDecodeReservation(t, fast.IPAM.Reservation)
	}
	return true
}

// checkDecodeReservation is checkDecodeNetConf for the reservation block
// against decodeBlock.
func checkDecodeReservation(t *testing.T, block json.RawMessage) bool {
	t.Helper()
	var fast, slow rawReservation
	ok := decodeReservation(block, &fast)
	err := decodeBlock("ipam.reservation", block, &slow)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("reservation %q: decoded, but decodeBlock fails: %v", block, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("reservation %q: decoded\n%#v\ndecodeBlock decodes\n%#v", block, fast, slow)
	}
	return true
}

func TestDecodeReservation(t *testing.T) {
	for _, tc := range []struct {
		block string
		fast  bool
	}{
		{`{"maxDuration":"24h","poolFull":"evict"}`, true},
		{` { "reuseDelay" : "0s" , "maxPerNamespace" : 12, "poolFull":"fail","maxDuration":null } `, true},
		{`{}`, true},
		{`{"maxduration":"24h"}`, false},  // decodeBlock matches it case-insensitively
		{`{"maxDurations":"24h"}`, false}, // decodeBlock refuses it, naming the key
		{`{"poolFull":null}`, false},      // json.Unmarshal sets the pointer to nil
		{`{"poolFull":"a","poolFull":"b"}`, false},
		{`"24h"`, false},
		{`null`, false},
		{``, false},
	} {
		if got := checkDecodeReservation(t, json.RawMessage(tc.block)); got != tc.fast {
			t.Errorf("%q: decodeReservation took the fast path: %v, want %v", tc.block, got, tc.fast)
		}
	}
}

func FuzzDecodeNetConf(f *testing.F) {
	for _, tc := range netConfCases {
		f.Add([]byte(tc.conf))
	}
	f.Fuzz(func(t *testing.T, conf []byte) {
		checkDecodeNetConf(t, conf)
		var top struct {
			IPAM struct {
				Reservation json.RawMessage `json:"reservation"`
			} `json:"ipam"`
		}
		if json.Unmarshal(conf, &top) == nil {
			checkDecodeReservation(t, top.IPAM.Reservation)
		}
	})
}

// TestDecodeEveryIPAMKey: every key of the ipam block (each json tag of
// ipamConf, and of the reservation block) set alone decodes as
// json.Unmarshal decodes it, and takes the fast path: a key added to the
// config but not to the decoder would be skipped as unknown, its value lost.
func TestDecodeEveryIPAMKey(t *testing.T) {
	values := map[reflect.Type]string{
		reflect.TypeOf(""):                `"/var/lib/x"`,
		reflect.TypeOf(new(string)):       `"/var/lib/x"`,
		reflect.TypeOf(json.RawMessage{}): `"90s"`,
	}
	elsewhere := map[string]bool{"routes": true, "ranges": true} // TestDecodeNetConf's cases
	check := func(typ reflect.Type, wrap func(key, value string) string, decodes func(conf string) bool) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			key := strings.Split(f.Tag.Get("json"), ",")[0]
			if f.Anonymous || elsewhere[key] {
				continue
			}
			v, ok := values[f.Type]
			if key == "ipsAnnotation" {
				v, ok = `{"namespaces":["a"]}`, true
			}
			if !ok {
				t.Fatalf("%s.%s (%s): no value to try; add one", typ.Name(), f.Name, f.Type)
			}
			conf := wrap(key, v)
			if !decodes(conf) {
				t.Errorf("%s alone did not take the fast path: %s", key, conf)
			}
		}
	}
	base := `{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"}]],%s}}`
	check(reflect.TypeOf(ipamConf{}), func(k, v string) string { return fmt.Sprintf(base, `"`+k+`":`+v) },
		func(conf string) bool { return checkDecodeNetConf(t, []byte(conf)) })
	check(reflect.TypeOf(rawReservation{}), func(k, v string) string {
		if k == "maxPerNamespace" {
			v = "7"
		}
		return `{"` + k + `":` + v + `}`
	}, func(conf string) bool { return checkDecodeReservation(t, json.RawMessage(conf)) })
}

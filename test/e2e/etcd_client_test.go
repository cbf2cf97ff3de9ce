//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// etcdClient talks to etcd members through their HTTP/JSON gateway
// (/v3/...), as `etcdctl` would through gRPC: from a thread switched into a
// node's network namespace (dialIn), to pod addresses of the test's cluster
// only, each request bounded by etcdRequestTimeout.
type etcdClient struct{ http *http.Client }

// etcdRequestTimeout bounds each request to a member (etcdctl's default
// --command-timeout is 5 s).
const etcdRequestTimeout = 5 * time.Second

// newEtcdClient dials from the network namespace h.
func newEtcdClient(h ns.NetNS) *etcdClient {
	return &etcdClient{http: &http.Client{Timeout: etcdRequestTimeout, Transport: &http.Transport{DialContext: dialIn(h), DisableKeepAlives: true}}}
}

// etcdMember is a member as `etcdctl member list` shows it.
type etcdMember struct {
	ID         string   `json:"ID"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
}

// String is the member as one line of `member list`.
func (m etcdMember) String() string {
	return fmt.Sprintf("%s peer %s client %s", m.Name, strings.Join(m.PeerURLs, ","), strings.Join(m.ClientURLs, ","))
}

// call posts req (JSON) to endpoint's gateway path and decodes the answer
// into resp; a non-200 answer is an error carrying etcd's message.
func (e *etcdClient) call(endpoint, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdRequestTimeout)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	res, err := e.http.Do(r)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s%s: %s: %s", endpoint, path, res.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, resp); err != nil {
		return fmt.Errorf("%s%s: %w: %s", endpoint, path, err, b)
	}
	return nil
}

// memberList is `etcdctl member list` (linearizable, its default) through
// endpoint.
func (e *etcdClient) memberList(endpoint string) ([]etcdMember, error) {
	return e.members(endpoint, true)
}

// members is `etcdctl member list --consistency=l` (linearizable) or
// `=s` (serializable: the member's own view, without a quorum).
func (e *etcdClient) members(endpoint string, linearizable bool) ([]etcdMember, error) {
	var resp struct{ Members []etcdMember }
	if err := e.call(endpoint, "/v3/cluster/member/list", map[string]any{"linearizable": linearizable}, &resp); err != nil {
		return nil, err
	}
	slices.SortFunc(resp.Members, func(a, b etcdMember) int { return strings.Compare(a.Name+a.ID, b.Name+b.ID) })
	return resp.Members, nil
}

// memberAdd is `etcdctl member add --peer-urls=peerURL` through endpoint;
// it returns the members, the new one (not started: no name yet) included.
func (e *etcdClient) memberAdd(endpoint, peerURL string) ([]etcdMember, error) {
	var resp struct{ Members []etcdMember }
	err := e.call(endpoint, "/v3/cluster/member/add", map[string]any{"peerURLs": []string{peerURL}}, &resp)
	return resp.Members, err
}

// memberUpdate is `etcdctl member update ID --peer-urls=peerURL` through
// endpoint.
func (e *etcdClient) memberUpdate(endpoint, id, peerURL string) error {
	var resp struct{}
	return e.call(endpoint, "/v3/cluster/member/update", map[string]any{"ID": id, "peerURLs": []string{peerURL}}, &resp)
}

// memberRemove is `etcdctl member remove ID` through endpoint.
func (e *etcdClient) memberRemove(endpoint, id string) error {
	var resp struct{}
	return e.call(endpoint, "/v3/cluster/member/remove", map[string]any{"ID": id}, &resp)
}

// put is `etcdctl put key value` through endpoint.
func (e *etcdClient) put(endpoint, key, value string) error {
	var resp struct{}
	return e.call(endpoint, "/v3/kv/put", map[string]string{"key": b64(key), "value": b64(value)}, &resp)
}

// get is `etcdctl get key` (linearizable) through endpoint: the value, and
// whether the key exists.
func (e *etcdClient) get(endpoint, key string) (string, bool, error) {
	var resp struct {
		KVs []struct{ Value string } `json:"kvs"`
	}
	if err := e.call(endpoint, "/v3/kv/range", map[string]string{"key": b64(key)}, &resp); err != nil {
		return "", false, err
	}
	if len(resp.KVs) == 0 {
		return "", false, nil
	}
	v, err := base64.StdEncoding.DecodeString(resp.KVs[0].Value)
	return string(v), true, err
}

// memberAt is the ID of the member that answers at endpoint (`etcdctl
// endpoint status`: the member's own header, no quorum needed).
func (e *etcdClient) memberAt(endpoint string) (string, error) {
	var resp struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
	}
	if err := e.call(endpoint, "/v3/maintenance/status", map[string]any{}, &resp); err != nil {
		return "", err
	}
	return resp.Header.MemberID, nil
}

// health is `etcdctl endpoint health` of one endpoint: a linearizable read
// of the key "health" answers (it needs a leader and a quorum), and no
// alarm is raised.
func (e *etcdClient) health(endpoint string) error {
	if _, _, err := e.get(endpoint, "health"); err != nil {
		return err
	}
	var resp struct {
		Alarms []map[string]any `json:"alarms"`
	}
	if err := e.call(endpoint, "/v3/maintenance/alarm", map[string]any{}, &resp); err != nil {
		return err
	}
	if len(resp.Alarms) != 0 {
		return fmt.Errorf("alarms %v", resp.Alarms)
	}
	return nil
}

// healthAll runs health on every endpoint at once and returns each one's
// error (nil: healthy).
func (e *etcdClient) healthAll(endpoints []string) map[string]error {
	type result struct {
		ep  string
		err error
	}
	ch := make(chan result, len(endpoints))
	for _, ep := range endpoints {
		go func() { ch <- result{ep, e.health(ep)} }()
	}
	out := map[string]error{}
	for range endpoints {
		r := <-ch
		out[r.ep] = r.err
	}
	return out
}

// eachEndpoint runs f on every endpoint at once and returns the result of
// the first endpoint, in their order, that answered without an error, and
// that endpoint; else every error.
func eachEndpoint[T any](endpoints []string, f func(endpoint string) (T, error)) (T, string, error) {
	type result struct {
		v   T
		err error
	}
	out := make([]result, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			v, err := f(ep)
			out[i] = result{v, err}
		})
	}
	wg.Wait()
	var errs []error
	for i, r := range out {
		if r.err == nil {
			return r.v, endpoints[i], nil
		}
		errs = append(errs, r.err)
	}
	var zero T
	return zero, "", errors.Join(errs...)
}

// b64 is a bytes field of the gateway's JSON.
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// etcdClientURL and etcdPeerURL are a member's URLs at pod address ip.
func etcdClientURL(ip string) string { return "http://" + net.JoinHostPort(ip, "2379") }
func etcdPeerURL(ip string) string   { return "http://" + net.JoinHostPort(ip, "2380") }

// urlHost is the address of a member URL ("" when it has none).
func urlHost(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Hostname()
}

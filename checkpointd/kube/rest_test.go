package kube_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/kube/kubetest"
)

// The client reads a cluster-scoped object (the node's Node: the placement
// publisher asks for its UID) and namespaced ones, lists across namespaces
// and creates, with the requests a real API server answers.
func TestClientRequests(t *testing.T) {
	srv := kubetest.New(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "n-uid"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "a"}, Data: map[string]string{"k": "v"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "a"}}, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "b"}})
	c, err := kube.NewREST(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var n corev1.Node
	if err := c.Get(ctx, kube.Nodes, "", "node1", &n); err != nil || n.UID != "n-uid" {
		t.Errorf("Get Node node1: %v, uid %q", err, n.UID)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, kube.ConfigMaps, "a", "cm", &cm); err != nil || cm.Data["k"] != "v" {
		t.Errorf("Get ConfigMap a/cm: %v, %v", err, cm.Data)
	}
	if err := c.Get(ctx, kube.ConfigMaps, "b", "cm", &cm); !apierrors.IsNotFound(err) {
		t.Errorf("Get ConfigMap b/cm: %v, want not found", err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, kube.Pods, "", metav1.ListOptions{}, &pods); err != nil || len(pods.Items) != 2 {
		t.Errorf("List pods of every namespace: %v, %d", err, len(pods.Items))
	}
	var created corev1.ConfigMap
	err = c.Create(ctx, kube.ConfigMaps, "b", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{}, &created)
	if err != nil || created.Namespace != "b" || created.ResourceVersion == "" {
		t.Errorf("Create ConfigMap b/new: %v, %+v", err, created.ObjectMeta)
	}
	if err := c.Readyz(ctx); err != nil {
		t.Errorf("Readyz: %v", err)
	}
}

// The reachability probe is not held back by the requests' rate limit: a
// burst of reads (Secrets at start) must not make the API server look away.
func TestReadyzIgnoresTheRateLimit(t *testing.T) {
	srv := kubetest.New(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}})
	cfg := srv.Config()
	cfg.QPS, cfg.Burst = 0.5, 1 // one request, then one every 2 s
	c, err := kube.NewREST(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	if err := c.Get(context.Background(), kube.Nodes, "", "node1", &n); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := c.Readyz(ctx); err != nil {
		t.Fatalf("Readyz after the rate limit's burst: %v", err)
	}
}

// A client with its own rate limit does not wait for the other's: the
// placement publisher's claims go out while a burst of Events uses the
// daemon's.
func TestOwnRateLimit(t *testing.T) {
	srv := kubetest.New(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}})
	cfg := srv.Config()
	cfg.QPS, cfg.Burst = 0.2, 1 // one request, then one every 5 s
	c, err := kube.NewREST(cfg)
	if err != nil {
		t.Fatal(err)
	}
	own, err := c.WithOwnRateLimit()
	if err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	if err := c.Get(context.Background(), kube.Nodes, "", "node1", &n); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := own.Get(ctx, kube.Nodes, "", "node1", &n); err != nil {
		t.Fatalf("a request of the client with its own limit after the other's burst: %v", err)
	}
	if err := c.Get(ctx, kube.Nodes, "", "node1", &n); err == nil {
		t.Fatal("the first client's limit let a second request through at once: the test shows nothing")
	}
}

// The client asks for protobuf and sends it, as the kubelet does: the
// watch's pods, the Secrets and ConfigMaps, the Events decode and encode
// several times cheaper than in JSON. A server that answers
// JSON is read all the same.
func TestClientSpeaksProtobuf(t *testing.T) {
	var accept, sent string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			sent = r.Header.Get("Content-Type")
		} else {
			accept = r.Header.Get("Accept")
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"a"},"data":{"k":"v"}}`)
	}))
	defer srv.Close()
	c, err := kube.NewREST(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), kube.ConfigMaps, "a", "cm", &cm); err != nil || cm.Data["k"] != "v" {
		t.Fatalf("Get answered in JSON: %v, %v", err, cm.Data)
	}
	if err := c.Create(context.Background(), kube.ConfigMaps, "a", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}, &cm); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(accept, "application/vnd.kubernetes.protobuf") || sent != "application/vnd.kubernetes.protobuf" {
		t.Errorf("Accept %q, a Create sent as %q: want protobuf first, and sent", accept, sent)
	}
}

// TestClientAsksNoCompression: no request of the client (a get, a list, a
// watch, the probe) asks for a compressed answer (Accept-Encoding), which
// a Go transport asks for unless told not to: the node decompressed every
// event of its pod watch.
func TestClientAsksNoCompression(t *testing.T) {
	srv := kubetest.New(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "a"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "a"}})
	var mu sync.Mutex
	asked := map[string]string{}
	front := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if enc := r.Header.Get("Accept-Encoding"); enc != "" {
			asked[r.Method+" "+r.URL.Path+"?"+r.URL.Query().Get("watch")] = enc
		}
		mu.Unlock()
		srv.Server.Config.Handler.ServeHTTP(w, r)
	}))
	defer front.Close()
	// Over TLS, as a node reaches its API server (client-go hands a
	// plain-HTTP config Go's default transport, whatever it asks).
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw})
	c, err := kube.NewREST(&rest.Config{Host: front.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var cm corev1.ConfigMap
	if err := c.Get(ctx, kube.ConfigMaps, "a", "cm", &cm); err != nil {
		t.Fatal(err)
	}
	var list corev1.PodList
	if err := c.List(ctx, kube.Pods, "", metav1.ListOptions{}, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("List: %v, %d items", err, len(list.Items))
	}
	w, err := c.ListWatch(kube.Pods, "").Watch(metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	_ = c.Readyz(ctx) // the fake serves no /readyz: only the request is looked at
	mu.Lock()
	defer mu.Unlock()
	if len(asked) > 0 {
		t.Errorf("requests asked for compressed answers: %v", asked)
	}
}

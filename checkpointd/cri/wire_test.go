package cri

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A runtime newer than checkpointd may send fields it does not know, of
// any wire type: they are skipped, the known ones read.
func TestDecodeSkipsUnknownFields(t *testing.T) {
	sb, err := proto.Marshal(&runtimeapi.PodSandbox{Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "prod", Uid: "u1", Attempt: 3}})
	if err != nil {
		t.Fatal(err)
	}
	sb = protowire.AppendTag(sb, 90, protowire.Fixed32Type)
	sb = protowire.AppendFixed32(sb, 7)
	sb = protowire.AppendTag(sb, 91, protowire.Fixed64Type)
	sb = protowire.AppendFixed64(sb, 7)
	sb = protowire.AppendTag(sb, 92, protowire.BytesType)
	sb = protowire.AppendBytes(sb, []byte{0x08, 0x01})
	msg := protowire.AppendTag(nil, 1, protowire.BytesType)
	msg = protowire.AppendBytes(msg, sb)
	got, err := decodeSandboxes(msg)
	if err != nil || len(got) != 1 || got[0].ID != "sb1" || got[0].Ready || got[0].Name != "web" || got[0].Namespace != "prod" || got[0].UID != "u1" {
		t.Fatalf("decodeSandboxes = %+v, %v", got, err)
	}
}

// A sandbox whose state is not sent is SANDBOX_READY (proto3's default).
func TestDecodeDefaultStateIsReady(t *testing.T) {
	sb, _ := proto.Marshal(&runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{Id: "sb1"}}})
	got, err := decodeSandboxes(sb)
	if err != nil || len(got) != 1 || !got[0].Ready {
		t.Fatalf("decodeSandboxes = %+v, %v", got, err)
	}
}

// An answer cut inside a field is an error, never a shorter list (a cut
// between two fields is a valid shorter message: readMessage's length,
// TestReadMessageShort, catches that one).
func TestDecodeTruncated(t *testing.T) {
	one, _ := proto.Marshal(&runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{Id: "sb1"}}})
	full, _ := proto.Marshal(&runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{Id: "sb1"}, {Id: "sb2"}}})
	for n := 1; n < len(full); n++ {
		if got, err := decodeSandboxes(full[:n]); err == nil && n != len(one) {
			t.Fatalf("%d of %d bytes decoded without error: %+v", n, len(full), got)
		}
	}
	st, _ := proto.Marshal(&runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: "sb1",
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.244.1.5"}}})
	for n := 1; n < len(st); n++ {
		if got, err := decodeStatus(st[:n], "info"); err == nil {
			t.Fatalf("%d of %d bytes decoded without error: %+v", n, len(st), got)
		}
	}
}

// A frame shorter than its length is an error.
func TestReadMessageShort(t *testing.T) {
	if _, err := readMessage(bytes.NewReader([]byte{0, 0, 0, 0, 5, 1, 2, 3})); err == nil {
		t.Fatal("a frame of 3 bytes announcing 5 was read")
	}
	if b, err := readMessage(bytes.NewReader([]byte{0, 0, 0, 0, 2, 1, 2})); err != nil || len(b) != 2 {
		t.Fatalf("readMessage = %v, %v", b, err)
	}
}

// The request is what the runtime's own decoder reads.
func TestEncodeStatusRequest(t *testing.T) {
	var r runtimeapi.PodSandboxStatusRequest
	if err := proto.Unmarshal(encodeStatusRequest("sb1", true), &r); err != nil || r.PodSandboxId != "sb1" || !r.Verbose {
		t.Fatalf("decoded %+v, %v", &r, err)
	}
}

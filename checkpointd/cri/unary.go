package cri

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// maxMessage bounds a runtime's answer (a ListPodSandbox of a full node
// with its labels and annotations is far smaller).
const maxMessage = 16 << 20

// transport is HTTP/2 without TLS (prior knowledge, as gRPC speaks it) to
// the runtime's unix socket. net/http carries the gRPC unary calls
// checkpointd makes: the gRPC library, for two calls, was a tenth of
// checkpointd's binary (issue 40).
func transport(socket string) *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{
		Protocols:          &p,
		DisableCompression: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
}

// unary makes the gRPC call method ("/package.Service/Method") with the
// encoded request msg and returns the encoded answer (gRPC over HTTP/2:
// each message framed by a byte "compressed" and a 4-byte length; the
// outcome in the grpc-status trailer, or in the headers when the runtime
// answers with an error alone).
func (c *Client) unary(ctx context.Context, method string, msg []byte) ([]byte, error) {
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	if d, ok := ctx.Deadline(); ok {
		// The runtime may give up when the caller has.
		req.Header.Set("Grpc-Timeout", strconv.FormatInt(max(time.Until(d).Milliseconds(), 1), 10)+"m")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP status %s", resp.Status)
	}
	out, rerr := readMessage(resp.Body)
	if rerr == nil {
		// The trailers come after the body.
		_, rerr = io.Copy(io.Discard, resp.Body)
	}
	if err := outcome(resp); err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	return out, nil
}

// readMessage reads one framed gRPC message.
func readMessage(r io.Reader) ([]byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if h[0] != 0 {
		// Never asked for (no grpc-accept-encoding is sent).
		return nil, errors.New("the answer is compressed")
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxMessage {
		return nil, fmt.Errorf("an answer of %d bytes, more than %d", n, maxMessage)
	}
	out := make([]byte, n)
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	return out, nil
}

// outcome is the call's outcome: nil for gRPC status 0 (OK), else an error
// with the code and the runtime's message.
func outcome(resp *http.Response) error {
	code, msg := resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	if code == "" {
		code, msg = resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	}
	if code == "0" {
		return nil
	}
	if code == "" {
		return errors.New("no grpc-status in the answer")
	}
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	name := code
	if n, err := strconv.Atoi(code); err == nil && n >= 0 && n < len(codeNames) {
		name = codeNames[n]
	}
	return fmt.Errorf("rpc error: code = %s desc = %s", name, msg)
}

// codeNames are gRPC's status codes, by number.
var codeNames = []string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}

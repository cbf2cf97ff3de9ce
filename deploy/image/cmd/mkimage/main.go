// Command mkimage builds the stickyip image archive offline (make image):
//
//	mkimage -o stickyip-image.tar -ref stickyip/stickyip:v1 -version v1 \
//	    stickyip=bin/stickyip checkpointd=bin/checkpointd stickyip-controller=bin/stickyip-controller
//
// Every timestamp is SOURCE_DATE_EPOCH (or -epoch), so the same binaries give
// the same archive and digest. It prints the reference and the manifest
// digest, the one `ctr images ls` shows after `ctr images import`.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stickyip/stickyip/deploy/image"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	out := fs.String("o", "", "archive to write (required)")
	ref := fs.String("ref", "", "image reference, e.g. stickyip/stickyip:v1.2.0 (required)")
	version := fs.String("version", "", "org.opencontainers.image.version label")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every timestamp in the image, seconds since 1970 ($SOURCE_DATE_EPOCH)")
	entry := fs.String("entrypoint", "/checkpointd", "the image's entrypoint")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *out == "" || *ref == "" || fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "mkimage: -o, -ref and at least one PATH=FILE are required")
		return 2
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil || secs < 0 {
		fmt.Fprintf(os.Stderr, "mkimage: -epoch (SOURCE_DATE_EPOCH) %q: want seconds since 1970\n", *epoch)
		return 2
	}
	created := time.Unix(secs, 0).UTC()
	spec := image.Spec{Entrypoint: []string{*entry}, Created: created,
		Labels: map[string]string{"org.opencontainers.image.title": "stickyip"}}
	if *version != "" {
		spec.Labels["org.opencontainers.image.version"] = *version
	}
	for _, a := range fs.Args() {
		dst, src, ok := strings.Cut(a, "=")
		if !ok || dst == "" || src == "" {
			fmt.Fprintf(os.Stderr, "mkimage: argument %q: want PATH-IN-IMAGE=FILE\n", a)
			return 2
		}
		b, err := os.ReadFile(src)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkimage:", err)
			return 1
		}
		spec.Files = append(spec.Files, image.File{Path: strings.TrimPrefix(dst, "/"), Mode: 0o755, Data: b})
	}
	img, err := image.Build(spec)
	if err == nil {
		err = image.WriteArchive(*out, *ref, img, created)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		return 1
	}
	d, err := img.Digest()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		return 1
	}
	fmt.Printf("%s %s %s\n", *out, *ref, d)
	return 0
}

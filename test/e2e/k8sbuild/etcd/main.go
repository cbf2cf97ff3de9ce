// Command etcd is etcd's own server, built from the Go module proxy at the
// version pinned in this module's go.mod, for the e2e tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }

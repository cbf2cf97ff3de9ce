package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/placement"
)

// runStranded is `checkpointd stranded`: the pods that wait for a node
// that no longer exists (exit 1 when there are any, 2 when the API server
// cannot tell).
func runStranded(args []string) int {
	fs := flag.NewFlagSet("checkpointd stranded", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of a user who may list Nodes and the pods of every namespace ($KUBECONFIG)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the API server")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: checkpointd stranded [--kubeconfig FILE] [--json]

Lists the pods annotated stickyip.io/placement: required that are Pending
for a node that no longer exists: deploy/placement required them onto the
node holding their IP, and that Node was deleted since. Such a pod waits
forever (its node affinity cannot change); delete it, and its controller
creates it again, free to run anywhere (a deleted Node's entries no longer
count). Exit status: 0 none, 1 some, 2 the API server could not tell.

`)
		fs.PrintDefaults()
	}
	if code := parse(fs, "checkpointd stranded", args); code >= 0 {
		return code
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkpointd stranded:", err)
		return 2
	}
	c, err := kube.NewREST(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkpointd stranded:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	pods, err := placement.FindStranded(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkpointd stranded:", err)
		return 2
	}
	if *asJSON {
		if pods == nil {
			pods = []placement.Stranded{}
		}
		out, _ := json.MarshalIndent(pods, "", "  ")
		fmt.Println(string(out))
	} else if len(pods) == 0 {
		fmt.Println("no pod waits for a node that no longer exists")
	} else {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAMESPACE\tPOD\tREQUIRED NODE (gone)\tPENDING FOR")
		for _, p := range pods {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Namespace, p.Name, strings.Join(p.Nodes, ","), time.Since(p.Created).Round(time.Second))
		}
		w.Flush()
		fmt.Println("\nDelete each: its controller creates it again without the requirement (kubectl delete pod -n NAMESPACE POD).")
	}
	if len(pods) > 0 {
		return 1
	}
	return 0
}

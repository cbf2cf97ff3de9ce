// Command gendeploy writes what `make chart` writes (package
// deploy/helm): the chart's verbatim copy of deploy/placement, and
// deploy/install/stickyip.yaml and deploy/placement/controller.yaml rendered
// from the chart.
//
//	go run ./deploy/helm/cmd/gendeploy -helm _output/tools/helm
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/stickyip/stickyip/deploy/helm"
)

func main() {
	helmBin := flag.String("helm", "_output/tools/helm", "the helm binary (scripts/install-helm.sh)")
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := helm.Generate(*helmBin, *root); err != nil {
		fmt.Fprintln(os.Stderr, "gendeploy:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s/, %s and %s\n", helm.ChartPlacementDir, helm.InstallManifest, helm.ControllerManifest)
}

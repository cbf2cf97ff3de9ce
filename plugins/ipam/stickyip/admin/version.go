package admin

import (
	"fmt"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

func (t *tool) version([]string) error {
	fmt.Fprintf(t.stdout, "stickyip %s (store schema %d)\n", contract.Version, boltstore.SchemaVersion)
	return nil
}

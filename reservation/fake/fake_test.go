package fake

import (
	"testing"

	"github.com/stickyip/stickyip/reservation/storetest"
)

func TestContract(t *testing.T) { storetest.Run(t, New().Update) }

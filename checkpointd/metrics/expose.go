package metrics

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// ContentType is the media type of the Prometheus text exposition format
// that Registry writes.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Collector is anything a Registry exposes: the metric types of this
// package and the Go runtime and process collector.
type Collector interface {
	collect(add func(family))
}

// family is one metric family at the time of a scrape.
type family struct {
	name, help, typ string
	samples         []sample
}

// sample is one line of a family: the family's name plus suffix (histogram
// _bucket, _sum, _count), its labels, its value.
type sample struct {
	suffix string
	labels []label
	value  float64
}

type label struct{ name, value string }

// Registry holds the collectors whose metrics /metrics serves.
type Registry struct {
	mu         sync.Mutex
	collectors []Collector
	names      map[string]bool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{names: map[string]bool{}} }

// MustRegister adds collectors; it panics when one exposes a family name
// already registered (a programming error, as two series of one name
// would make the page invalid).
func (r *Registry) MustRegister(cs ...Collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		c.collect(func(f family) {
			if r.names[f.name] {
				panic(fmt.Sprintf("metrics: %s registered twice", f.name))
			}
			r.names[f.name] = true
		})
		r.collectors = append(r.collectors, c)
	}
}

// WriteTo writes every registered metric in the text exposition format
// 0.0.4, families sorted by name.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	cs := append([]Collector(nil), r.collectors...)
	r.mu.Unlock()
	var fams []family
	for _, c := range cs {
		c.collect(func(f family) { fams = append(fams, f) })
	}
	sort.Slice(fams, func(i, j int) bool { return fams[i].name < fams[j].name })
	var b bytes.Buffer
	for _, f := range fams {
		writeFamily(&b, f)
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// writeFamily writes f's help, type and samples; a family with no sample
// (a vector none of whose label values is set) is left out.
func writeFamily(b *bytes.Buffer, f family) {
	if len(f.samples) == 0 {
		return
	}
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", f.name, helpEscaper.Replace(f.help), f.name, f.typ)
	for _, s := range f.samples {
		b.WriteString(f.name)
		b.WriteString(s.suffix)
		if len(s.labels) > 0 {
			b.WriteByte('{')
			for i, l := range s.labels {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(l.name)
				b.WriteString(`="`)
				b.WriteString(labelEscaper.Replace(l.value))
				b.WriteByte('"')
			}
			b.WriteByte('}')
		}
		b.WriteByte(' ')
		b.WriteString(formatFloat(s.value))
		b.WriteByte('\n')
	}
}

// formatFloat writes v as Prometheus does: the shortest form that reads
// back as v, and +Inf, -Inf, NaN.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Handler serves the registry's metrics in the text format (a client that
// goes away mid-page gets a cut page; nothing else can fail).
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		_, _ = r.WriteTo(w)
	})
}

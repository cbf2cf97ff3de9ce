package metrics

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parse reads a page with the Prometheus server's own text parser, with the
// classic (strictest) name rules.
func parse(t *testing.T, page []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("Prometheus cannot parse the page: %v\n%s", err, page)
	}
	return fams
}

func page(t *testing.T, r *Registry) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A scraper reads back every name, type, help text, label value and value
// as set, whatever bytes the label values and help texts hold.
func TestExpositionParsesBack(t *testing.T) {
	r := NewRegistry()
	c := NewCounter("t_requests_total", `Requests, C:\path and "quotes",`+"\nsecond line.")
	g := NewGauge("t_temperature", "A gauge.")
	cv := NewCounterVec("t_errors_total", "Errors by step.", "step")
	gv := NewGaugeVec("t_free", "Free by network.", "network")
	r.MustRegister(gv, c, g, cv) // not in name order: the page is
	c.Add(2.5)
	c.Inc()
	g.Set(-1e-7)
	odd := []string{`back\slash`, `quo"te`, "new\nline", `all\"` + "\n", "plain", ""}
	for i, v := range odd {
		cv.WithLabelValues(v).Add(float64(i + 1))
	}
	for _, v := range []float64{math.Inf(1), math.Inf(-1), 1e21} {
		gv.WithLabelValues(formatFloat(v)).Set(v)
	}
	gv.WithLabelValues("nan").Set(math.NaN())

	raw := page(t, r)
	fams := parse(t, raw)

	want := map[string]dto.MetricType{"t_requests_total": dto.MetricType_COUNTER, "t_temperature": dto.MetricType_GAUGE,
		"t_errors_total": dto.MetricType_COUNTER, "t_free": dto.MetricType_GAUGE}
	for name, typ := range want {
		if f := fams[name]; f == nil || f.GetType() != typ {
			t.Errorf("%s: parsed %v, want type %v", name, f, typ)
		}
	}
	if len(fams) != len(want) {
		t.Errorf("parsed %d families, want %d", len(fams), len(want))
	}
	if got := fams["t_requests_total"].GetHelp(); got != c.help {
		t.Errorf("help parsed back as %q, want %q", got, c.help)
	}
	if got := fams["t_requests_total"].GetMetric()[0].GetCounter().GetValue(); got != 3.5 {
		t.Errorf("counter parsed back as %v, want 3.5", got)
	}
	if got := fams["t_temperature"].GetMetric()[0].GetGauge().GetValue(); got != -1e-7 {
		t.Errorf("gauge parsed back as %v, want -1e-7", got)
	}

	var labels []string
	for _, m := range fams["t_errors_total"].GetMetric() {
		lv := m.GetLabel()[0].GetValue()
		labels = append(labels, lv)
		if i := slices.Index(odd, lv); i < 0 || m.GetCounter().GetValue() != float64(i+1) {
			t.Errorf("series step=%q = %v: not a label value set (or not its value)", lv, m.GetCounter().GetValue())
		}
	}
	sorted := slices.Clone(odd)
	slices.Sort(sorted)
	if !slices.Equal(labels, sorted) {
		t.Errorf("series in page order %q, want every label value, sorted: %q", labels, sorted)
	}
	for _, m := range fams["t_free"].GetMetric() {
		lv, v := m.GetLabel()[0].GetValue(), m.GetGauge().GetValue()
		if (lv == "nan") != math.IsNaN(v) || (lv != "nan" && formatFloat(v) != lv) {
			t.Errorf("t_free{network=%q} parsed back as %v", lv, v)
		}
	}

	var order []string
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
			order = append(order, f[2])
		}
	}
	if !slices.IsSorted(order) {
		t.Errorf("families in page order %q, want sorted by name", order)
	}
}

// A histogram's buckets count every observation at or below their bound,
// up to +Inf, with the sum and count beside them.
func TestHistogramBuckets(t *testing.T) {
	r := NewRegistry()
	h := NewHistogram("t_seconds", "Durations.", ExponentialBuckets(1, 2, 4)) // 1 2 4 8
	r.MustRegister(h)
	for _, v := range []float64{0.5, 1, 1.5, 3, 8, 9, 100} {
		h.Observe(v)
	}
	f := parse(t, page(t, r))["t_seconds"]
	if f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) != 1 {
		t.Fatalf("parsed %v, want one histogram", f)
	}
	hist := f.GetMetric()[0].GetHistogram()
	var got []string
	for _, b := range hist.GetBucket() {
		got = append(got, formatFloat(b.GetUpperBound())+":"+formatFloat(float64(b.GetCumulativeCount())))
	}
	if want := []string{"1:2", "2:3", "4:4", "8:5", "+Inf:7"}; !slices.Equal(got, want) {
		t.Errorf("buckets (le:count) %q, want %q", got, want)
	}
	if hist.GetSampleCount() != 7 || hist.GetSampleSum() != 123 || h.Count() != 7 {
		t.Errorf("count %d (Count() %d), sum %v; want 7, 123", hist.GetSampleCount(), h.Count(), hist.GetSampleSum())
	}
}

// Registering a second family of a name already exposed is refused at
// once (the page would hold two families of one name).
func TestRegisterTwice(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(NewGauge("t_x", "x"))
	defer func() {
		if recover() == nil {
			t.Error("a second t_x was registered")
		}
	}()
	r.MustRegister(NewCounter("t_x", "x"))
}

// A vector's Reset drops its series from the page (a network no longer
// configured is no longer reported).
func TestVecReset(t *testing.T) {
	r := NewRegistry()
	v := NewGaugeVec("t_ips", "IPs.", "network")
	r.MustRegister(v)
	v.WithLabelValues("gone").Set(1)
	v.Reset()
	v.WithLabelValues("cbr0").Set(2)
	if p := string(page(t, r)); strings.Contains(p, "gone") || !strings.Contains(p, `t_ips{network="cbr0"} 2`+"\n") || v.Len() != 1 {
		t.Errorf("after Reset and one Set, %d series, page:\n%s", v.Len(), p)
	}
}

package docgen

import "testing"

// TestDefaultsFindsEveryChangeWithItsReason also checks that every changed default has a reason
// and every reason a changed default: Defaults fails otherwise.
func TestDefaultsFindsEveryChangeWithItsReason(t *testing.T) {
	defaults, err := Defaults()
	if err != nil {
		t.Fatal(err)
	}
	want := []Default{
		{Flag: "cloud-provider", Upstream: "", Ours: "ironcore"},
		{Flag: "concurrent-node-syncs", Upstream: "1", Ours: "50"},
		{Flag: "concurrent-service-syncs", Upstream: "1", Ours: "100"},
		{Flag: "kube-api-burst", Upstream: "30", Ours: "400"},
		{Flag: "kube-api-qps", Upstream: "20", Ours: "200"},
		{Flag: "route-reconciliation-period", Upstream: "10s", Ours: "2s"},
	}
	if len(defaults) != len(want) {
		t.Fatalf("got %+v, want %+v", defaults, want)
	}
	for i, got := range defaults {
		if got.Flag != want[i].Flag || got.Upstream != want[i].Upstream || got.Ours != want[i].Ours || got.Reason == "" {
			t.Errorf("default %d = %+v, want %+v with a reason", i, got, want[i])
		}
	}
}

package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTheTableHasTheFloorOncePerSizeAndEveryRunInOrder(t *testing.T) {
	// timings gives done objects taking 1, 2, ..., done seconds.
	timings := func(done int) Timings {
		var sorted []time.Duration
		for i := 1; i <= done; i++ {
			sorted = append(sorted, time.Duration(i)*time.Second)
		}
		return newTimings(sorted)
	}
	run := func(label string, nodes, services int, command string) *Result {
		return &Result{Label: label, Nodes: nodes, Services: services, Command: command,
			Flags: []string{"-nodes=" + fmt.Sprint(nodes), "-label=" + label}, Version: "v0.0.0-test",
			LoadBalancerReadiness: timings(services), FirstTraffic: timings(services), RoutingComplete: timings(services),
			NodeInitialization: timings(nodes), BurstFloor: BurstFloor{FirstTraffic: timings(services / 2)}}
	}
	reference := run("reference", 300, 100, "bin/reference-ccm --cluster-name=lab")
	reference.Unfinished = &Unfinished{Addresses: 5, Incomplete: 100}
	reference.Convergence = 300
	reference.LoadBalancerReadiness, reference.FirstTraffic, reference.RoutingComplete = timings(95), timings(40), Timings{}
	dir := t.TempDir()
	for i, r := range []*Result{
		reference,
		run("ironcore-ccm-selector", 1000, 300, DefaultCommand+" --use-nic-selector=true"),
		run("ironcore-ccm-default", 300, 100, DefaultCommand),
		run("ironcore-ccm-selector", 300, 100, DefaultCommand+" --use-nic-selector"),
	} {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, r.Name()+".json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// Not a run: the page reads only the results.
			if err := os.WriteFile(filepath.Join(dir, r.Name()+".md"), []byte("#"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	results, err := LoadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for line := range strings.Lines(Table(results)) {
		if cells := strings.Split(line, " | "); len(cells) > 3 && !strings.HasPrefix(line, "| Nodes") {
			rows = append(rows, strings.TrimPrefix(cells[0], "| ")+" "+cells[1]+" "+cells[2])
		}
	}
	want := []string{
		"**300 / 100** IronCore alone (floor) selector",
		"300 / 100 ironcore-ccm-default default",
		"300 / 100 ironcore-ccm-selector selector",
		"300 / 100 reference selector",
		"**1,000 / 300** IronCore alone (floor) selector",
		"1,000 / 300 ironcore-ccm-selector selector",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	table := Table(results)
	for _, fragment := range []string{
		"| ironcore-ccm-default | default | 50.0 / 100.0 | 50.0 / 100.0 | 2.00× / 2.00× | 50.0 / 100.0 | 150.0 / 300.0 | 0 |  |",
		"| reference | selector | 50.0 / not done (95 of 100 done) | not done / not done (40 of 100 done) | – | none of 100 done | 150.0 / 300.0 | 0 | 5 without an address, 100 routings incomplete |",
		"[reference-n300-s100](results/reference-n300-s100.md)",
		"![1,000 Nodes, 300 Services](results/n1000-s300.png)\n",
		"- `reference-n300-s100`: `make bench BENCH_FLAGS='-nodes=300 -label=reference'` (v0.0.0-test, 0001-01-01)",
	} {
		if !strings.Contains(table, fragment) {
			t.Errorf("the table lacks %q:\n%s", fragment, table)
		}
	}
}

func TestReplaceTableKeepsWhatSurroundsIt(t *testing.T) {
	page := "# Benchmarks\n\n" + tableBegin + "\n\nold table\n" + tableEnd + "\n\nafter\n"
	got, err := ReplaceTable([]byte(page), "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Benchmarks\n\n" + tableBegin + "\n\nnew table\n\n" + tableEnd + "\n\nafter\n"; string(got) != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if _, err := ReplaceTable([]byte("# no markers\n"), "x"); err == nil {
		t.Error("a page without the markers was accepted")
	}
}

// The page's table is what its results give: a run added or changed without regenerating
// the page (make bench-page) fails here.
func TestTheBenchmarkPageShowsItsResults(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "benchmarks")
	results, err := LoadResults(filepath.Join(dir, ResultsDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(results) == 0 {
		t.Fatalf("no results in %s", filepath.Join(dir, ResultsDir))
	}
	page, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReplaceTable(page, Table(results))
	if err != nil {
		t.Fatal(err)
	}
	if string(page) != string(want) {
		t.Error("docs/benchmarks/README.md's table is not what its results give; run make bench-page")
	}
	for _, r := range results {
		for _, name := range []string{r.Name() + ".md", r.Name() + ".png", PlotName(r.Nodes, r.Services)} {
			if _, err := os.Stat(filepath.Join(dir, ResultsDir, name)); err != nil {
				t.Errorf("the page links %s: %v", name, err)
			}
		}
	}
}

func TestARunPastItsDeadlineSaysSoOnItsPage(t *testing.T) {
	r := &Result{Label: "slow", Nodes: 3, Services: 2, Convergence: 300, Unfinished: &Unfinished{Addresses: 1, Incomplete: 2}}
	page := r.Markdown()
	if !strings.Contains(page, "**Not converged**: the run stopped waiting at its deadline, 300s after the burst began: 1 without an address, 2 routings incomplete.") {
		t.Errorf("the page does not say what was not done:\n%s", page)
	}
	if strings.Contains(page, "Everything converged") {
		t.Errorf("the page of a run past its deadline says everything converged:\n%s", page)
	}
	r.Unfinished = nil
	if page := r.Markdown(); strings.Contains(page, "Not converged") || !strings.Contains(page, "Everything converged 300.000s") {
		t.Errorf("the page of a converged run:\n%s", page)
	}
}

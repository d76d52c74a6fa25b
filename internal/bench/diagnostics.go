package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// Diagnostics: with -profile, a run also writes what its figures are made of, to find what
// sets a pace rather than guess it: when each object was created and done (timeline.tsv),
// every write to both control planes (writes-ironcore.tsv, writes-target.tsv), the CPU time of
// each process of the machine over the burst (cpu.tsv), the target cluster's events by reason
// (events.tsv), and the stack's logs.

// writeTimeline writes one line per stopwatch key: the key, and when it was created and done,
// in seconds after t0 (done is empty for a key not done).
func (s *stopwatch) writeTimeline(w io.Writer, t0 time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.started))
	for key := range s.started {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	if _, err := fmt.Fprintln(w, "key\tcreated\tdone"); err != nil {
		return err
	}
	for _, key := range keys {
		done := ""
		if at, ok := s.finished[key]; ok {
			done = seconds(at.Sub(t0))
		}
		if _, err := fmt.Fprintf(w, "%s\t%s\t%s\n", key, seconds(s.started[key].Sub(t0)), done); err != nil {
			return err
		}
	}
	return nil
}

// writeWrites writes one line per write a proxy forwarded: when it came, in seconds after t0,
// and how long the API server took to answer it.
func writeWrites(w io.Writer, writes []apiproxy.Write, t0 time.Time) error {
	if _, err := fmt.Fprintln(w, "at\tverb\tresource\tname\tstatus\tbytes\ttook"); err != nil {
		return err
	}
	for _, write := range writes {
		if _, err := fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", seconds(write.At.Sub(t0)), write.Verb, write.Resource, write.Name, write.Status, write.Bytes, seconds(write.Took)); err != nil {
			return err
		}
	}
	return nil
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }

// processCPU is the CPU time, in clock ticks, each process of the machine has used, by pid.
type processCPU map[int]processTicks

type processTicks struct {
	command string
	ticks   int64
}

// readProcessCPU reads every process's CPU time from /proc; processes that end meanwhile are
// left out.
func readProcessCPU() (processCPU, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	cpu := processCPU{}
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "stat"))
		if err != nil {
			continue
		}
		if command, ticks, ok := parseStat(string(stat)); ok {
			cpu[pid] = processTicks{command: command, ticks: ticks}
		}
	}
	return cpu, nil
}

// parseStat reads a process's command name and its user and system CPU ticks from the text
// of /proc/<pid>/stat, whose command name is in parentheses and may hold spaces.
func parseStat(stat string) (string, int64, bool) {
	open, closing := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return "", 0, false
	}
	fields := strings.Fields(stat[closing+1:])
	// After the name: state is the 1st field, utime and stime the 12th and 13th.
	if len(fields) < 13 {
		return "", 0, false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, false
	}
	return stat[open+1 : closing], utime + stime, true
}

// writeCPU writes the CPU seconds each process used between before and after, most first;
// processes that used none are left out.
func writeCPU(w io.Writer, before, after processCPU) error {
	type use struct {
		pid     int
		command string
		seconds float64
	}
	var uses []use
	for pid, now := range after {
		used := now.ticks - before[pid].ticks
		if then, ok := before[pid]; ok && then.command != now.command {
			used = now.ticks
		}
		if used > 0 {
			// Linux counts CPU time in ticks of 1/100 s.
			uses = append(uses, use{pid: pid, command: now.command, seconds: float64(used) / 100})
		}
	}
	slices.SortFunc(uses, func(a, b use) int {
		if a.seconds != b.seconds {
			if a.seconds > b.seconds {
				return -1
			}
			return 1
		}
		return a.pid - b.pid
	})
	if _, err := fmt.Fprintln(w, "cpu_seconds\tpid\tcommand"); err != nil {
		return err
	}
	for _, u := range uses {
		if _, err := fmt.Fprintf(w, "%.2f\t%d\t%s\n", u.seconds, u.pid, u.command); err != nil {
			return err
		}
	}
	return nil
}

// diagnostics gathers a run's diagnostics and writes them into dir.
type diagnostics struct {
	dir       string
	burst     time.Time
	cpuBefore processCPU
}

// startDiagnostics notes the burst's start and every process's CPU time.
func startDiagnostics(dir string, burst time.Time) (*diagnostics, error) {
	cpu, err := readProcessCPU()
	if err != nil {
		return nil, fmt.Errorf("read the processes' CPU time: %w", err)
	}
	return &diagnostics{dir: dir, burst: burst, cpuBefore: cpu}, nil
}

// cpuUntilNow writes each process's CPU seconds since the burst began.
func (d *diagnostics) cpuUntilNow() error {
	after, err := readProcessCPU()
	if err != nil {
		return fmt.Errorf("read the processes' CPU time: %w", err)
	}
	return d.write("cpu.tsv", func(w io.Writer) error { return writeCPU(w, d.cpuBefore, after) })
}

// finish writes the timeline, both proxies' writes, the events and a copy of the stack's logs.
func (d *diagnostics) finish(ctx context.Context, stack *testenv.Stack, tracker *tracker, ironcore []apiproxy.Write) error {
	events, err := stack.TargetClientset.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the target cluster's events: %w", err)
	}
	if err := d.write("events.tsv", func(w io.Writer) error { return writeEventReasons(w, events.Items) }); err != nil {
		return err
	}
	target := stack.TargetProxy.Writes()
	if err := d.write("timeline.tsv", func(w io.Writer) error { return tracker.writeTimeline(w, d.burst) }); err != nil {
		return err
	}
	if err := d.write("writes-ironcore.tsv", func(w io.Writer) error { return writeWrites(w, ironcore, d.burst) }); err != nil {
		return err
	}
	if err := d.write("writes-target.tsv", func(w io.Writer) error { return writeWrites(w, target, d.burst) }); err != nil {
		return err
	}
	logs, err := filepath.Glob(filepath.Join(stack.Dir, "*.log"))
	if err != nil {
		return err
	}
	for _, log := range logs {
		text, err := os.ReadFile(log)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d.dir, filepath.Base(log)), text, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (d *diagnostics) write(name string, fill func(io.Writer) error) error {
	f, err := os.Create(filepath.Join(d.dir, name))
	if err != nil {
		return err
	}
	return errors.Join(fill(f), f.Close())
}

// writeEventReasons writes the events' occurrences by type, involved kind, reason and source,
// most first: event writes share the CCM's budget of requests to the target cluster.
func writeEventReasons(w io.Writer, events []corev1.Event) error {
	type group struct{ kind, reason, source string }
	counts := map[group][2]int{}
	for _, event := range events {
		g := group{kind: event.Type + "\t" + event.InvolvedObject.Kind, reason: event.Reason, source: cmp.Or(event.Source.Component, event.ReportingController)}
		c := counts[g]
		counts[g] = [2]int{c[0] + 1, c[1] + occurrences(event)}
	}
	groups := slices.Collect(maps.Keys(counts))
	slices.SortFunc(groups, func(a, b group) int {
		return cmp.Or(cmp.Compare(counts[b][1], counts[a][1]), cmp.Compare(a.kind, b.kind), cmp.Compare(a.reason, b.reason), cmp.Compare(a.source, b.source))
	})
	if _, err := fmt.Fprintln(w, "occurrences\tevents\ttype\tkind\treason\tsource"); err != nil {
		return err
	}
	for _, g := range groups {
		if _, err := fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\n", counts[g][1], counts[g][0], g.kind, g.reason, g.source); err != nil {
			return err
		}
	}
	return nil
}

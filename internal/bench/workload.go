package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// workers bounds how many objects are created at once.
const workers = 20

func nodeName(i int) string    { return fmt.Sprintf("node-%04d", i) }
func serviceName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// parallel runs fn for 0..n-1 on a bounded number of goroutines and returns the first error.
func parallel(n int, fn func(i int) error) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	next := make(chan int)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return firstErr
}

// createMachines creates the Machines the Nodes run on and waits until IronCore runs them
// and their NetworkInterfaces have addresses, as before a kubelet could register. Prescheduled
// Machines are spread over the stack's MachinePools in turn when they are created, as if a
// provider had placed them, so that their provisioning does not wait for IronCore's scheduler.
func createMachines(ctx context.Context, stack *testenv.Stack, n int, prescheduled bool) error {
	pools := slices.Sorted(maps.Keys(testenv.Pools()))
	if prescheduled && len(pools) == 0 {
		return fmt.Errorf("the stack has no MachinePools to pre-schedule Machines on")
	}
	err := parallel(n, func(i int) error {
		var opts testenv.MachineOptions
		if prescheduled {
			opts.Pool = pools[i%len(pools)]
		}
		_, err := stack.CreateMachine(ctx, nodeName(i), opts)
		return err
	})
	if err != nil {
		return err
	}
	return testenv.WaitFor(ctx, 30*time.Minute, fmt.Sprintf("%d Machines to run with addresses", n), func(ctx context.Context) error {
		machines := &computev1alpha1.MachineList{}
		nics := &networkingv1alpha1.NetworkInterfaceList{}
		if err := stack.ListIronCore(ctx, []client.ObjectList{machines, nics}); err != nil {
			return err
		}
		running, addressed := 0, 0
		for _, machine := range machines.Items {
			if machine.Status.State == computev1alpha1.MachineStateRunning {
				running++
			}
		}
		for _, nic := range nics.Items {
			if len(nic.Status.IPs) > 0 {
				addressed++
			}
		}
		if running < n || addressed < n {
			return fmt.Errorf("%d running, %d addressed", running, addressed)
		}
		return nil
	})
}

// internal tells whether the burst's i-th Service is Internal: every fifth is.
func internal(i int) bool { return i%5 == 0 }

// createBurst registers the Nodes, as kubelets with pod CIDRs from node IPAM would, and creates
// the Services, one in five of them Internal, all at once.
func createBurst(ctx context.Context, stack *testenv.Stack, tracker *tracker, nodes, services int) error {
	return parallel(nodes+services, func(i int) error {
		if i < nodes {
			for _, key := range nodeKeys(nodeName(i)) {
				tracker.created(key)
			}
			_, err := stack.CreateNode(ctx, nodeName(i), testenv.NodeOptions{PodCIDRs: []string{podCIDR(i)}})
			return err
		}
		j := i - nodes
		opts := testenv.ServiceOptions{}
		if internal(j) {
			opts.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
		}
		for _, key := range serviceKeys(serviceName(j)) {
			tracker.created(key)
		}
		_, err := stack.CreateLoadBalancerService(ctx, serviceName(j), opts)
		return err
	})
}

// processUsage reads the process's peak resident memory and CPU time from /proc.
func processUsage(pid int) (Usage, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("read the CCM's memory use: %w", err)
	}
	var usage Usage
	for _, line := range strings.Split(string(status), "\n") {
		if value, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB")), 64)
			if err != nil {
				return Usage{}, fmt.Errorf("parse VmHWM %q: %w", value, err)
			}
			usage.PeakRSSMiB = kib / 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("read the CCM's CPU time: %w", err)
	}
	// The fields after the command name (which is in parentheses and may contain spaces):
	// utime and stime are the 12th and 13th, in clock ticks of 1/100 s on Linux.
	_, rest, ok := strings.Cut(string(stat), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		return Usage{}, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, stat)
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return Usage{}, fmt.Errorf("parse the CCM's CPU time from %q", stat)
	}
	usage.CPUSeconds = (utime + stime) / 100
	return usage, nil
}

// memorySampler records the highest anonymous and file-backed resident memory of a process,
// which /proc gives only as they are now.
type memorySampler struct {
	pid  int
	mu   sync.Mutex
	anon float64
	file float64
}

// sampleMemory samples the process every 100 ms until ctx ends.
func sampleMemory(ctx context.Context, pid int) *memorySampler {
	m := &memorySampler{pid: pid}
	go func() {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			m.sample()
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return m
}

func (m *memorySampler) sample() {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.pid))
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, line := range strings.Split(string(status), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "RssAnon" && name != "RssFile") {
			continue
		}
		kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB")), 64)
		if err != nil {
			continue
		}
		if name == "RssAnon" {
			m.anon = max(m.anon, kib/1024)
		} else {
			m.file = max(m.file, kib/1024)
		}
	}
}

// peaks samples once more and returns the highest anonymous and file-backed memory in MiB.
func (m *memorySampler) peaks() (anon, file float64) {
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.anon, m.file
}

package docgen

import (
	"errors"
	"fmt"
	"sort"

	"github.com/spf13/pflag"
	"k8s.io/cloud-provider/options"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ccmdefaults"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// The upstream flags whose defaults this CCM changes (ccmdefaults.Apply), and why.

// changedDefaultReasons says why ccmdefaults.Apply changes each flag's default, by flag name.
func changedDefaultReasons() map[string]string {
	return map[string]string{
		"cloud-provider": "This binary implements only the `" + provider.ProviderName + "` provider, so it is preselected; any other value stops the CCM.",
		"concurrent-service-syncs": "A new Service's first EnsureLoadBalancer waits at most a second for IronCore to allocate addresses, on the cache's watch; " +
			"with fewer workers than Services in a burst, later Services' LoadBalancers wait for earlier Services' waits (at 30 workers, " +
			"the last of 100 new LoadBalancers was created 4 s after its Service). A waiting worker costs no CPU.",
		"concurrent-node-syncs": "Initializing a Node reads the IronCore cache and patches the Node, and the worker waits for the API server's answer: " +
			"with 10 workers, 1,000 new Nodes waited 23 s on average in the queue and took up to 48 s to initialize; with 50, 2 s and 10 s " +
			"(measured on the test stack, where the API servers share two cores). More were slower while a conflicting update was retried on the " +
			"informer's copy (with 200, up to 27 s); now that it is retried on the API server's copy, one run with 100 took up to 6.7 s, " +
			"within the spread of runs with 50 (5.4-12.6 s). A Node is a load balancer target only once initialized.",
		"kube-api-qps": "Initializing a Node, routing it and serving Services cost a few requests each to the target cluster: " +
			"at 20 per second, 300 new Nodes took 31 s to initialize. At 200, with 50 Node workers, no request waited for the limit " +
			"while 1,000 Nodes and 300 Services were created at once (measured on the test stack). " +
			"The API server's priority and fairness still protects it from a burst.",
		"kube-api-burst": "Twice --kube-api-qps, so that a burst of new Nodes starts at once.",
		"route-reconciliation-period": "ListRoutes reads the IronCore cache and CreateRoute writes only missing routes, " +
			"so a pass costs no IronCore request unless something changed; reconciling often gives a new Node its routes within seconds. " +
			"(The watch-based reconciliation feature gate is no faster: it reconciles at most every 10s, and retries only on Node events.)",
	}
}

// Default is an upstream flag whose default this CCM changes.
type Default struct {
	// Flag is the flag's name, without dashes.
	Flag string
	// Upstream and Ours are the flag's default without and with Apply, as --help prints them.
	Upstream, Ours string
	// Reason says why the default is changed.
	Reason string
}

// Defaults lists the upstream flags whose defaults ccmdefaults.Apply changes, sorted by flag name. It finds
// them by comparing the upstream flag sets with and without Apply, so the list is complete by
// construction; a changed flag without a reason, or a reason for an unchanged flag, is an error.
// It is for generating docs, not for the running CCM: building the upstream flag sets also
// registers the process-wide feature gate flag, which closes the gate to new features.
func Defaults() ([]Default, error) {
	upstream, err := flagDefaults(false)
	if err != nil {
		return nil, err
	}
	ours, err := flagDefaults(true)
	if err != nil {
		return nil, err
	}
	why := changedDefaultReasons()
	var defaults []Default
	var errs []error
	for name, value := range ours {
		if upstream[name] == value {
			continue
		}
		reason, ok := why[name]
		if !ok {
			errs = append(errs, fmt.Errorf("the default of --%s is changed without a reason", name))
		}
		delete(why, name)
		defaults = append(defaults, Default{Flag: name, Upstream: upstream[name], Ours: value, Reason: reason})
	}
	for name := range why {
		errs = append(errs, fmt.Errorf("a reason is given for --%s, whose default is not changed", name))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Slice(defaults, func(i, j int) bool { return defaults[i].Flag < defaults[j].Flag })
	return defaults, nil
}

// flagDefaults returns the default of every upstream flag, by name.
func flagDefaults(apply bool) (map[string]string, error) {
	o, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		return nil, fmt.Errorf("upstream options: %w", err)
	}
	if apply {
		ccmdefaults.Apply(o)
	}
	defaults := map[string]string{}
	// The controller and webhook lists only shape the usage text of --controllers and --webhooks,
	// not any default.
	for _, fs := range o.Flags(nil, nil, nil, nil, nil).FlagSets {
		fs.VisitAll(func(f *pflag.Flag) { defaults[f.Name] = f.DefValue })
	}
	return defaults, nil
}

// FlagNames lists the upstream command's flags, but the global ones (--help, --version and the
// logging flags). Like Defaults, it is for docs and their tests.
func FlagNames() ([]string, error) {
	defaults, err := flagDefaults(true)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(defaults))
	for name := range defaults {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// RoutesWithoutClusterCIDR explains DisableRoutesWithoutClusterCIDR for the reference docs.
const RoutesWithoutClusterCIDR = "With `--configure-cloud-routes` (default `true`) but no `--cluster-cidr`, the CCM turns routes off " +
	"and logs so, instead of letting the upstream route controller stop the process over the missing CIDR: clusters with an overlay " +
	"network leave both flags at their defaults and want no routes. Set `--cluster-cidr` to route pod CIDRs through IronCore, " +
	"or `--configure-cloud-routes=false` to say that no routes are wanted."

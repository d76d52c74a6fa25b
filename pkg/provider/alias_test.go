package provider_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// startCloudWithConfig builds and initializes a provider, stopped when the test ends, from the
// stack's cloud-config with extra lines appended.
func startCloudWithConfig(t *testing.T, extra string) *provider.Cloud {
	t.Helper()
	return startCloudWithConfigAndOptions(t, extra, testOptions())
}

// startCloudWithConfigAndOptions is startCloudWithConfig with the given options.
func startCloudWithConfigAndOptions(t *testing.T, extra string, options *config.Options) *provider.Cloud {
	t.Helper()
	base, err := os.ReadFile(stack.CloudConfig)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cloud-config.yaml")
	if err := os.WriteFile(path, append(base, extra...), 0o600); err != nil {
		t.Fatal(err)
	}
	c, factory, stop := startWithInformers(t, provider.Settings{CloudConfigPath: path, Options: options, Recorder: recorder})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return c
}

// TestClusterNameAliasesAdoptTheReferencesLoadBalancers: a reference CCM run with a
// --cluster-name other than its clusterName recorded that flag's value on its LoadBalancers.
// With the flag's value among clusterNameAliases, they are this cluster's and adopted in place,
// and record the current name from then on; without it, they are someone else's and left
// alone.
func TestClusterNameAliasesAdoptTheReferencesLoadBalancers(t *testing.T) {
	const oldName = "reference-flag-name"
	ctx := context.Background()
	aliased := startCloudWithConfig(t, "clusterNameAliases: ["+oldName+"]\n")
	plain := testCloud(t)
	for _, tc := range []struct {
		name          string
		lbName        func(*corev1.Service) string
		checkConflict bool
	}{
		{name: "alias-uid-name", lbName: lbspec.Name, checkConflict: true},
		{name: "alias-legacy-name", lbName: func(s *corev1.Service) string { return legacyName(oldName, s) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			service := createService(t, tc.name, testenv.ServiceOptions{})
			nodes := workerNodes(t, tc.name+"-1")
			before := referenceLoadBalancer(t, tc.lbName(service), oldName, service, false, aliased, plain)

			if tc.checkConflict {
				// Without the aliases, the LoadBalancer is another cluster's.
				_, err := loadBalancerOf(t, plain).EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
				if !errorContains(err, `of cluster "`+oldName+`"`) || !errorContains(err, "clusterNameAliases") {
					t.Fatalf("EnsureLoadBalancer without the alias: error %v, want an ownership conflict naming clusterNameAliases", err)
				}
				if after := ironcoreLoadBalancer(t, before.Name); after.ResourceVersion != before.ResourceVersion || after.DeletionTimestamp != nil {
					t.Fatal("without the alias, the LoadBalancer was changed")
				}
			}

			status := ensureUntilReady(t, loadBalancerOf(t, aliased), service, nodes)
			after := ironcoreLoadBalancer(t, before.Name)
			if after.UID != before.UID {
				t.Fatalf("LoadBalancer %s was recreated (UID %s, was %s)", before.Name, after.UID, before.UID)
			}
			if ips := ingressIPs(status); len(ips) != 1 || ips[0] != before.Status.IPs[0].String() {
				t.Fatalf("ingress %v, want the address it had: %v", ips, before.Status.IPs)
			}
			if after.Labels[keys.LabelClusterName] != stack.ClusterName || after.Annotations[keys.AnnotationClusterName] != stack.ClusterName {
				t.Errorf("the adopted LoadBalancer does not record the current cluster name: labels %v, annotations %v", after.Labels, after.Annotations)
			}
			owned, err := aliased.IronCore().LoadBalancersOfService(ctx, service.UID)
			if err != nil {
				t.Fatal(err)
			}
			for _, lb := range owned {
				if lb.Name != before.Name {
					t.Errorf("a second LoadBalancer %s was created", lb.Name)
				}
			}
		})
	}
}

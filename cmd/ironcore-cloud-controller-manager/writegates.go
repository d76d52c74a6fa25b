package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/options"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/dryrun"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/leasefence"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/writegate"
)

// gateWrites gates every write of the cluster's clients: with --dry-run, writes are recorded
// instead of sent (dryRun); otherwise, with leader election, they are fenced by the lease.
func gateWrites(completed *cloudcontrollerconfig.CompletedConfig, anonymous *restclient.Config, ironcoreOptions *config.Options) (*leasefence.Fence, *dryrun.Recorder, error) {
	if ironcoreOptions.DryRun {
		recorder, err := dryRun(completed, anonymous, ironcoreOptions.DryRunAddress)
		return nil, recorder, err
	}
	fence, err := leaseFence(completed, anonymous)
	return fence, nil, err
}

// leaseFence returns, with leader election on, the fence that keeps this replica from writing
// to IronCore and to the cluster unless it renewed its leader lease within the renew deadline.
// It watches the leader election's writes of the lease through the configuration the framework
// builds the leader election's client from, which the framework does only after this runs, as
// it does the controllers' clients, whose writes the fence gates there. anonymous is the
// configuration anonymous clients are built on (reloadTargetCredentials).
func leaseFence(completed *cloudcontrollerconfig.CompletedConfig, anonymous *restclient.Config) (*leasefence.Fence, error) {
	election := completed.ComponentConfig.Generic.LeaderElection
	if !election.LeaderElect {
		return nil, nil
	}
	if _, err := leasefence.CheckWindow(election.RenewDeadline.Duration, election.LeaseDuration.Duration, election.RetryPeriod.Duration); err != nil {
		return nil, err
	}
	fence := leasefence.New(election.ResourceNamespace, election.ResourceName, election.RenewDeadline.Duration, election.LeaseDuration.Duration)
	gate := writegate.New(leasefence.Unfenced)
	gate.SetFence(fence)
	// The gate goes first, onto the base transport, whose connections it fences.
	completed.Kubeconfig.Wrap(gate.Wrap)
	completed.Kubeconfig.Wrap(fence.Wrap)
	return fence, gateWritingClients(completed, anonymous, gate)
}

// dryRun has every write to the cluster recorded instead of sent, turns leader election off
// (a dry run never competes for the lease, and decides as the leader would), and serves the
// recorded writes on address until the process ends.
func dryRun(completed *cloudcontrollerconfig.CompletedConfig, anonymous *restclient.Config, address string) (*dryrun.Recorder, error) {
	recorder := dryrun.New()
	gate := writegate.New(nil)
	gate.RecordInstead(recorder.For(dryrun.Cluster)) //nolint:bodyclose // the recorder answers in the transport; the client closes the answer
	completed.Kubeconfig.Wrap(gate.Wrap)
	// Controllers acting as their own service accounts would have them created and get tokens
	// for them: writes. In a dry run they read with the CCM's own credentials.
	completed.ComponentConfig.KubeCloudShared.UseServiceAccountCredentials = false
	if err := gateWritingClients(completed, anonymous, gate); err != nil {
		return nil, err
	}
	completed.ClientBuilder = clientbuilder.SimpleControllerClientBuilder{ClientConfig: completed.Kubeconfig}
	// The shared informers' client only reads; it is gated all the same, so that no client of
	// a dry run can write.
	if err := buildSharedInformers(completed, completed.Kubeconfig); err != nil {
		return nil, err
	}
	completed.ComponentConfig.Generic.LeaderElection.LeaderElect = false
	if address == "" {
		return nil, errors.New("--dry-run-address must be set with --dry-run")
	}
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("--dry-run-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/dry-run", recorder)
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "The dry run's report is no longer served", "address", address)
		}
	}()
	klog.InfoS("Dry run: nothing is written to IronCore or the cluster, and no leader lease is taken; the writes this CCM would make are served",
		"url", "http://"+listener.Addr().String()+"/dry-run")
	return recorder, nil
}

// gateWritingClients builds again, on the configuration the gate now wraps, the clients the
// framework built before: the one events are sent with, and the one that gets the tokens of
// controllers acting as their own service accounts.
func gateWritingClients(completed *cloudcontrollerconfig.CompletedConfig, anonymous *restclient.Config, gate *writegate.Gate) error {
	client, err := kubernetes.NewForConfig(restclient.AddUserAgent(completed.Kubeconfig, options.CloudControllerManagerUserAgent))
	if err != nil {
		return fmt.Errorf("build the cluster client: %w", err)
	}
	completed.Client = client
	if completed.ComponentConfig.KubeCloudShared.UseServiceAccountCredentials {
		anonymous := restclient.CopyConfig(anonymous)
		anonymous.Wrap(gate.Wrap)
		completed.ClientBuilder = clientbuilder.NewDynamicClientBuilder(anonymous, client.CoreV1(), metav1.NamespaceSystem)
	}
	return nil
}

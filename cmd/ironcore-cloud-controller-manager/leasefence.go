package main

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/options"
	"k8s.io/controller-manager/pkg/clientbuilder"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/leasefence"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/writegate"
)

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

	// The framework built two clients before: the one events are sent with, and the one that
	// gets the tokens of controllers acting as their own service accounts. Their successors
	// write through the gate.
	client, err := kubernetes.NewForConfig(restclient.AddUserAgent(completed.Kubeconfig, options.CloudControllerManagerUserAgent))
	if err != nil {
		return nil, fmt.Errorf("build the cluster client: %w", err)
	}
	completed.Client = client
	if completed.ComponentConfig.KubeCloudShared.UseServiceAccountCredentials {
		anonymous := restclient.CopyConfig(anonymous)
		anonymous.Wrap(gate.Wrap)
		completed.ClientBuilder = clientbuilder.NewDynamicClientBuilder(anonymous, client.CoreV1(), metav1.NamespaceSystem)
	}
	return fence, nil
}

package main

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/options"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/credentials"
)

// reloadTargetCredentials has the target cluster's clients send with the current credentials of
// the --kubeconfig file, read again when it changes and on 401 as the IronCore kubeconfig is:
// the framework read the file once and built its clients from it, so the ones built before
// this (the shared informers', the events', the root of the service account credentials) are
// built again. It returns the configuration to build anonymous clients on, which keeps the TLS
// settings the credentials' configuration leaves to its transport. Without --kubeconfig (in a
// Pod, the ServiceAccount's token file, which client-go reads again itself) or with --master
// naming another server, nothing changes.
func reloadTargetCredentials(completed *cloudcontrollerconfig.CompletedConfig) (*restclient.Config, error) {
	loaded := completed.Kubeconfig
	anonymous := restclient.AnonymousClientConfig(loaded)
	path := completed.ComponentConfig.Generic.ClientConnection.Kubeconfig
	if path == "" {
		return anonymous, nil
	}
	transport, cfg, err := credentials.New("target", path, "/version", func(contents []byte) (*restclient.Config, error) {
		raw, err := credentials.Parse(path, contents)
		if err != nil {
			return nil, fmt.Errorf("read kubeconfig %s: %w", path, err)
		}
		return clientcmd.NewNonInteractiveClientConfig(*raw, raw.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	})
	if err != nil {
		return nil, err
	}
	if cfg.Host != loaded.Host {
		klog.InfoS("The target cluster's kubeconfig is not read again: --master names another server", "kubeconfig", path)
		return anonymous, nil
	}
	cfg.ContentConfig, cfg.DisableCompression, cfg.QPS, cfg.Burst = loaded.ContentConfig, loaded.DisableCompression, loaded.QPS, loaded.Burst
	if err := transport.Watch(context.Background()); err != nil {
		// A 401 still has the kubeconfig read again.
		klog.ErrorS(err, "Cannot watch the target cluster's kubeconfig for changes")
	}
	completed.Kubeconfig = cfg
	if completed.Client, err = kubernetes.NewForConfig(restclient.AddUserAgent(cfg, options.CloudControllerManagerUserAgent)); err != nil {
		return nil, fmt.Errorf("build the cluster client: %w", err)
	}
	if err := buildSharedInformers(completed, cfg); err != nil {
		return nil, err
	}
	if completed.ComponentConfig.KubeCloudShared.UseServiceAccountCredentials {
		completed.ClientBuilder = clientbuilder.NewDynamicClientBuilder(anonymous, completed.Client.CoreV1(), metav1.NamespaceSystem)
	} else {
		completed.ClientBuilder = clientbuilder.SimpleControllerClientBuilder{ClientConfig: cfg}
	}
	return anonymous, nil
}

// buildSharedInformers builds the shared informers' client, and the informers, on cfg.
func buildSharedInformers(completed *cloudcontrollerconfig.CompletedConfig, cfg *restclient.Config) error {
	var err error
	if completed.VersionedClient, err = kubernetes.NewForConfig(restclient.AddUserAgent(cfg, "shared-informers")); err != nil {
		return fmt.Errorf("build the shared informers' client: %w", err)
	}
	// The framework's resync: the minimum resync period, jittered by up to as much again.
	resync := wait.Jitter(completed.ComponentConfig.Generic.MinResyncPeriod.Duration, 1.0)
	completed.SharedInformers = informers.NewSharedInformerFactory(completed.VersionedClient, resync)
	return nil
}

package testenv

import (
	"fmt"
	"net/netip"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes cfg as a kubeconfig whose context has the given namespace.
func WriteKubeconfig(path string, cfg *rest.Config, namespace string) error {
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["stack"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kubeconfig.AuthInfos["stack"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kubeconfig.Contexts["stack"] = &clientcmdapi.Context{Cluster: "stack", AuthInfo: "stack", Namespace: namespace}
	kubeconfig.CurrentContext = "stack"
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func mustIPPrefix(cidr string) *commonv1alpha1.IPPrefix {
	return &commonv1alpha1.IPPrefix{Prefix: netip.MustParsePrefix(cidr)}
}

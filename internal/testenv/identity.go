package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// Manifests splits a multi-document YAML file into objects, skipping empty documents.
func Manifests(manifest []byte) ([]*unstructured.Unstructured, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var objects []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objects, nil
			}
			return nil, fmt.Errorf("decode manifest: %w", err)
		}
		if len(obj.Object) > 0 {
			objects = append(objects, obj)
		}
	}
}

// isRBACKind tells whether objects of kind make up an identity and its permissions.
func isRBACKind(kind string) bool {
	switch kind {
	case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		return true
	}
	return false
}

// serviceAccountIdentity creates the ServiceAccount and RBAC objects of manifest on cluster and
// returns a configuration that authenticates as that ServiceAccount with a token, so that
// whoever uses it has exactly the manifest's permissions. If namespace is set, it replaces the
// namespace of the namespaced objects and of the bindings' subjects.
func serviceAccountIdentity(ctx context.Context, cluster *Cluster, manifest []byte, namespace string) (*rest.Config, error) {
	objects, err := Manifests(manifest)
	if err != nil {
		return nil, err
	}
	var account *unstructured.Unstructured
	for _, obj := range objects {
		if !isRBACKind(obj.GetKind()) {
			continue
		}
		if namespace != "" {
			if obj.GetNamespace() != "" {
				obj.SetNamespace(namespace)
			}
			if err := setSubjectNamespaces(obj, namespace); err != nil {
				return nil, err
			}
		}
		if err := cluster.Client.Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("create %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "ServiceAccount" {
			account = obj
		}
	}
	if account == nil {
		return nil, errors.New("the manifest has no ServiceAccount")
	}
	clientset, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		return nil, err
	}
	token, err := clientset.CoreV1().ServiceAccounts(account.GetNamespace()).CreateToken(ctx, account.GetName(), &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64((24 * time.Hour).Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request a token for ServiceAccount %s/%s: %w", account.GetNamespace(), account.GetName(), err)
	}
	return &rest.Config{
		Host:            cluster.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: cluster.Config.CAData},
		BearerToken:     token.Status.Token,
	}, nil
}

func setSubjectNamespaces(obj *unstructured.Unstructured, namespace string) error {
	subjects, found, err := unstructured.NestedSlice(obj.Object, "subjects")
	if err != nil || !found {
		return err
	}
	for _, subject := range subjects {
		if s, ok := subject.(map[string]any); ok && s["kind"] == "ServiceAccount" {
			s["namespace"] = namespace
		}
	}
	return unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
}

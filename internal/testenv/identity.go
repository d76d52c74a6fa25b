package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
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
// returns a configuration that authenticates as that ServiceAccount with a token, and its name, so that
// whoever uses it has exactly the manifest's permissions. If namespace is set, it replaces the
// namespace of the namespaced objects and of the bindings' subjects.
func serviceAccountIdentity(ctx context.Context, cluster *Cluster, manifest []byte, namespace string) (*rest.Config, types.NamespacedName, error) {
	objects, err := Manifests(manifest)
	if err != nil {
		return nil, types.NamespacedName{}, err
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
				return nil, types.NamespacedName{}, err
			}
		}
		if err := cluster.Client.Create(ctx, obj); err != nil {
			return nil, types.NamespacedName{}, fmt.Errorf("create %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "ServiceAccount" {
			account = obj
		}
	}
	if account == nil {
		return nil, types.NamespacedName{}, errors.New("the manifest has no ServiceAccount")
	}
	token, err := serviceAccountToken(ctx, cluster, account.GetNamespace(), account.GetName(), nil)
	if err != nil {
		return nil, types.NamespacedName{}, err
	}
	return &rest.Config{
		Host:            cluster.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: cluster.Config.CAData},
		BearerToken:     token,
	}, types.NamespacedName{Namespace: account.GetNamespace(), Name: account.GetName()}, nil
}

// serviceAccountToken requests a token of the ServiceAccount namespace/name, valid for a day or
// until the Secret it is bound to (if any) is deleted.
func serviceAccountToken(ctx context.Context, cluster *Cluster, namespace, name string, boundTo *corev1.Secret) (string, error) {
	clientset, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		return "", err
	}
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64((24 * time.Hour).Seconds()))}
	if boundTo != nil {
		spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: boundTo.Name, UID: boundTo.UID}
	}
	token, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return token.Status.Token, nil
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

// Package deploy holds the manifests rendered from the Helm chart, for kustomize users and for
// the tests, which run the CCM with exactly these roles and validate them against a real API
// server.
package deploy

import _ "embed"

//go:generate sh -c "cd ../hack/tools/helm && go run . -root ../../.."

// TargetManifests are the CCM's objects in the target cluster, rendered with the chart's
// default values in namespace kube-system.
//
//go:embed kustomize/target/ironcore-cloud-controller-manager.yaml
var TargetManifests []byte

// IronCoreRBAC is the ServiceAccount, Role and ClusterRole the CCM needs in IronCore, for the
// chart's default namespace placeholder (kustomize sets the real one).
//
//go:embed kustomize/ironcore/rbac.yaml
var IronCoreRBAC []byte

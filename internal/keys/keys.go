// Package keys holds the label and annotation keys the CCM reads and writes. Keys shared with
// the reference IronCore CCM keep their names for compatibility; new keys carry our own prefix.
package keys

// Prefix is the domain of every label and annotation key this CCM introduces.
const Prefix = "cloud-provider.ironcore.dev/"

// LabelCluster marks the Machines and NetworkInterfaces that back this cluster's Nodes; its
// value is the cluster name. Load balancer selectors and routes find NetworkInterfaces by it.
// The key is the reference CCM's.
const LabelCluster = "kubernetes.io/cluster"

// LabelMachinePool is set on Nodes to the name of the MachinePool their Machine runs on.
const LabelMachinePool = Prefix + "machine-pool"

package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/version"
)

// withVersion makes the upstream command's --version print this CCM's build (the upstream one
// prints the version of Kubernetes' own components, which this binary does not set), and has
// the first log line of a run, and the build info metric, say which build runs.
func withVersion(command *cobra.Command) {
	run := command.RunE
	command.RunE = func(cmd *cobra.Command, args []string) error {
		build := version.Get()
		if flag := cmd.Flags().Lookup("version"); flag != nil {
			switch flag.Value.String() {
			case "true":
				_, err := fmt.Fprint(cmd.OutOrStdout(), build.String())
				return err
			case "raw":
				_, err := fmt.Fprint(cmd.OutOrStdout(), build.JSON())
				return err
			}
		}
		klog.InfoS("Starting "+commandName, build.KeysAndValues()...)
		metrics.Register()
		return run(cmd, args)
	}
}

package docgen

import (
	"github.com/spf13/pflag"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
)

// flagsReference renders docs/reference/flags.md: the IronCore flags as config registers them,
// and the upstream flags whose defaults ccmdefaults changes.
func flagsReference() ([]byte, error) {
	defaults, err := Defaults()
	if err != nil {
		return nil, err
	}
	d := newDocument("Flags")
	d.paragraph("`ironcore-cloud-controller-manager` takes every flag of the upstream `k8s.io/cloud-provider` command " +
		"(`ironcore-cloud-controller-manager --help` lists them all), some with other defaults, plus the IronCore flags.")

	d.section("IronCore flags")
	d.table([]string{"Flag", "Type", "Default", "Meaning"}, ironCoreFlagRows())

	d.section("Upstream flags with other defaults")
	rows := make([][]string, 0, len(defaults))
	for _, changed := range defaults {
		rows = append(rows, []string{code("--" + changed.Flag), code(changed.Upstream), code(changed.Ours), changed.Reason})
	}
	d.table([]string{"Flag", "Upstream default", "Default here", "Why"}, rows)

	d.section("Routes without `--cluster-cidr`")
	d.paragraph(RoutesWithoutClusterCIDR)
	return d.bytes(), nil
}

// ironCoreFlagRows registers the IronCore flags on a fresh flag set, as main does, and lists
// them in --help's order.
func ironCoreFlagRows() [][]string {
	fs := pflag.NewFlagSet("IronCore", pflag.ContinueOnError)
	config.NewOptions().AddFlags(fs)
	var rows [][]string
	fs.VisitAll(func(f *pflag.Flag) {
		rows = append(rows, []string{code("--" + f.Name), f.Value.Type(), code(f.DefValue), f.Usage})
	})
	return rows
}

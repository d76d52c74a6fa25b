package docgen

import (
	"maps"
	"slices"
	"strings"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
)

// cloudConfigReference renders docs/reference/cloud-config.md from config.Fields.
func cloudConfigReference() []byte {
	fields := config.Fields()
	d := newDocument("Cloud-config")
	d.paragraph("The file given with `--cloud-config`, in the reference CCM's format. Keys are decoded strictly: an unknown " +
		"or misspelt key stops the CCM with an error naming it (and the key it probably meant), and all problems are reported together. " +
		"The reference CCM ignored unknown keys; here a misspelt key silently ignored would run the cluster with a default nobody chose. " +
		"A key that is neither known nor close to a known one may be meant for a newer version of this CCM or for another CCM: remove it.")

	d.section("Keys")
	rows := make([][]string, 0, len(fields))
	for _, field := range fields {
		rows = append(rows, []string{code(field.Key), field.Type, field.Required, field.Default, field.Description})
	}
	d.table([]string{"Key", "Type", "Required", "Default", "Description"}, rows)

	d.section("Keys of the reference CCM that are not supported")
	d.paragraph("These keys of some reference CCM version stop this CCM like any unknown key, with an error saying what to set instead:")
	unsupported := config.UnsupportedReferenceKeys()
	rows = rows[:0]
	for _, key := range slices.Sorted(maps.Keys(unsupported)) {
		rows = append(rows, []string{code(key), unsupported[key]})
	}
	d.table([]string{"Key", "Instead"}, rows)

	d.section("Example")
	d.paragraph("```yaml\n" + exampleCloudConfig(fields) + "```")
	return d.bytes()
}

// exampleCloudConfig is a cloud-config file that sets every key to its example value.
func exampleCloudConfig(fields []config.Field) string {
	var b strings.Builder
	for _, field := range fields {
		if field.InsteadOf != "" {
			b.WriteString("# " + field.Key + ": " + field.Example + "  # instead of " + field.InsteadOf + "\n")
			continue
		}
		b.WriteString(field.Key + ": " + field.Example + "\n")
	}
	return b.String()
}

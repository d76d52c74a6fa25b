package docgen

import (
	"strings"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// annotationsReference renders docs/reference/annotations.md from AllKeys, one section per
// set of objects, in the registry's order.
func annotationsReference() []byte {
	d := newDocument("Labels and annotations")
	d.paragraph("Every label and annotation the CCM reads or writes, by the object that carries it. Keys defined by the " +
		"reference CCM keep its names, so that a cluster can switch between the two; keys new in this CCM start with `" + keys.Prefix + "`. " +
		"Readers and writers are named as in `--controllers`.")

	var order []string
	byObjects := map[string][][]string{}
	for _, key := range AllKeys() {
		objects := strings.Join(key.On, ", ")
		if _, seen := byObjects[objects]; !seen {
			order = append(order, objects)
		}
		byObjects[objects] = append(byObjects[objects], []string{
			code(key.Name), string(key.Kind), key.WrittenBy, key.ReadBy, string(key.Origin), key.Meaning,
		})
	}
	for _, objects := range order {
		d.section(objects)
		d.table([]string{"Key", "Kind", "Written by", "Read by", "Defined by", "Meaning"}, byObjects[objects])
	}
	return d.bytes()
}

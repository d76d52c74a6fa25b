package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestFieldsDocumentEveryKey fails when CloudConfig gains, loses or reorders a key without its
// documentation following.
func TestFieldsDocumentEveryKey(t *testing.T) {
	var structKeys []string
	structType := reflect.TypeFor[CloudConfig]()
	for i := range structType.NumField() {
		name, _, _ := strings.Cut(structType.Field(i).Tag.Get("json"), ",")
		structKeys = append(structKeys, name)
	}
	if documented := knownKeys(); !slices.Equal(documented, structKeys) {
		t.Fatalf("Fields documents %v, CloudConfig has %v", documented, structKeys)
	}
	for _, field := range Fields() {
		for name, value := range map[string]string{"Type": field.Type, "Required": field.Required, "Default": field.Default, "Example": field.Example, "Description": field.Description} {
			if value == "" {
				t.Errorf("field %s has no %s", field.Key, name)
			}
		}
	}
}

func TestFieldsTypesComeFromTheStruct(t *testing.T) {
	for _, field := range Fields() {
		want := map[string]string{
			"clusterNameAliases":            "list of strings",
			"nodeLabelsFromMachine":         "list of strings",
			"podCIDRParentPrefixLabels":     "mapping of strings to strings",
			"ipv6PodCIDRParentPrefixLabels": "mapping of strings to strings",
			"podCIDRMaskSize":               "int",
			"ipv6PodCIDRMaskSize":           "int",
		}[field.Key]
		if want == "" {
			want = "string"
		}
		if field.Type != want {
			t.Errorf("field %s has type %q, want %s", field.Key, field.Type, want)
		}
	}
	if got := yamlType("noSuchKey"); got != "" {
		t.Errorf("yamlType of an unknown key = %q, want empty", got)
	}
}

// TestFieldExamplesMakeAValidFile keeps the documented example file working.
func TestFieldExamplesMakeAValidFile(t *testing.T) {
	var doc strings.Builder
	for _, field := range Fields() {
		if field.InsteadOf == "" {
			doc.WriteString(field.Key + ": " + field.Example + "\n")
		}
	}
	cfg, err := ParseCloudConfig([]byte(doc.String()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

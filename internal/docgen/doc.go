// Package docgen generates the reference documentation from the code it documents: the flags
// (internal/config, internal/ccmdefaults), the cloud-config keys (config.Fields), the labels and
// annotations (AllKeys) and the event reasons (EventReasons). Its tests fail when the
// committed files are stale, and when the code records an event reason that is not documented.
package docgen

//go:generate go run ../../hack/gendocs -root ../..

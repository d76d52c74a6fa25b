// Package version tells which build of the CCM is running, from the build information the Go
// toolchain embeds in every binary (no hand-kept string): the version of the commit, the
// commit, the Go version, and the versions of the IronCore API and k8s.io/cloud-provider it
// was built with. --version prints it, the first log line and the ironcore_ccm_build_info
// metric carry it.
package version

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// Module paths whose versions a build reports.
const (
	ironcoreModule      = "github.com/ironcore-dev/ironcore"
	cloudProviderModule = "k8s.io/cloud-provider"
)

// unknown stands for what a build does not record (a binary built without its git history).
const unknown = "unknown"

// Info is what a build records about itself.
type Info struct {
	// Version is the git tag of the commit, or v0.0.0-<commit time>-<commit> between tags,
	// with -dirty when the tree had changes.
	Version string `json:"version"`
	// Commit is the full commit hash; CommitTime when it was made (RFC 3339, UTC).
	Commit     string `json:"commit"`
	CommitTime string `json:"commitTime"`
	// Modified tells whether the tree had changes the commit does not hold.
	Modified bool `json:"modified"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// IronCoreAPI and CloudProvider are the versions of github.com/ironcore-dev/ironcore and
	// k8s.io/cloud-provider the binary was built with.
	IronCoreAPI   string `json:"ironcoreAPI"`
	CloudProvider string `json:"cloudProvider"`
}

// Get is the running binary's Info.
func Get() Info {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: unknown, Commit: unknown, GoVersion: unknown, IronCoreAPI: unknown, CloudProvider: unknown}
	}
	return FromBuildInfo(info)
}

// FromBuildInfo reads an Info from a binary's build information. The main module's version is
// the one the go command gives a tagged commit (vX.Y.Z) or a commit between tags (a
// pseudo-version, v0.0.0-<time>-<commit>); a build from outside git (go run, tests) has none,
// and the version is made from the commit the build records, if any.
func FromBuildInfo(info *debug.BuildInfo) Info {
	settings := map[string]string{}
	for _, setting := range info.Settings {
		settings[setting.Key] = setting.Value
	}
	result := Info{
		Commit:        orUnknown(settings["vcs.revision"]),
		CommitTime:    orUnknown(settings["vcs.time"]),
		Modified:      settings["vcs.modified"] == "true",
		GoVersion:     orUnknown(info.GoVersion),
		IronCoreAPI:   dependency(info, ironcoreModule),
		CloudProvider: dependency(info, cloudProviderModule),
	}
	// The go command marks a modified tree's version +dirty; this CCM's versions say -dirty, so
	// that a version is one string without build metadata.
	version, dirty := strings.CutSuffix(info.Main.Version, "+dirty")
	result.Modified = result.Modified || dirty
	if version == "" || version == "(devel)" {
		version = pseudoVersion(settings["vcs.time"], settings["vcs.revision"])
	}
	if result.Modified && version != unknown {
		version += "-dirty"
	}
	result.Version = version
	return result
}

// pseudoVersion is v0.0.0-<commit time>-<commit>, as the go command writes it, or unknown
// without a commit.
func pseudoVersion(commitTime, revision string) string {
	if revision == "" {
		return unknown
	}
	stamp := "00000000000000"
	if t, err := time.Parse(time.RFC3339, commitTime); err == nil {
		stamp = t.UTC().Format("20060102150405")
	}
	return fmt.Sprintf("v0.0.0-%s-%s", stamp, revision[:min(12, len(revision))])
}

// dependency is the version the build used of the module, after any replace directive.
func dependency(info *debug.BuildInfo, path string) string {
	for _, module := range info.Deps {
		if module.Path != path {
			continue
		}
		if module.Replace != nil && module.Replace.Version != "" {
			return module.Replace.Version
		}
		return orUnknown(module.Version)
	}
	return unknown
}

func orUnknown(value string) string {
	if value == "" {
		return unknown
	}
	return value
}

// String is what --version prints: the program and its version, then the rest one per line.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ironcore-cloud-controller-manager %s\n", i.Version)
	fmt.Fprintf(&b, "  commit:         %s (%s)\n", i.Commit, i.CommitTime)
	fmt.Fprintf(&b, "  go:             %s\n", i.GoVersion)
	fmt.Fprintf(&b, "  ironcore API:   %s\n", i.IronCoreAPI)
	fmt.Fprintf(&b, "  cloud-provider: %s\n", i.CloudProvider)
	return b.String()
}

// JSON is what --version=raw prints.
func (i Info) JSON() string {
	data, err := json.MarshalIndent(i, "", "  ")
	if err != nil {
		// Info holds only strings and a bool.
		return fmt.Sprintf("%+v", i)
	}
	return string(data) + "\n"
}

// KeysAndValues are the Info for a structured log line.
func (i Info) KeysAndValues() []any {
	return []any{"version", i.Version, "commit", i.Commit, "goVersion", i.GoVersion,
		"ironcoreAPI", i.IronCoreAPI, "cloudProvider", i.CloudProvider}
}

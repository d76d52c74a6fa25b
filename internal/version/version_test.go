package version

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
)

func buildInfo(mainVersion string, settings map[string]string) *debug.BuildInfo {
	info := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/ironcore-dev/ironcore-cloud-controller-manager", Version: mainVersion},
		Deps: []*debug.Module{
			{Path: ironcoreModule, Version: "v0.5.0"},
			{Path: cloudProviderModule, Version: "v0.35.3", Replace: &debug.Module{Path: cloudProviderModule, Version: "v0.35.4"}},
			{Path: "k8s.io/client-go", Version: "v0.35.3"},
		},
	}
	for key, value := range settings {
		info.Settings = append(info.Settings, debug.BuildSetting{Key: key, Value: value})
	}
	return info
}

func TestFromBuildInfo(t *testing.T) {
	const revision = "7fe32f0abcdef0123456789abcdef0123456789a"
	commit := map[string]string{"vcs.revision": revision, "vcs.time": "2026-11-26T19:48:45Z", "vcs.modified": "false"}
	dirty := map[string]string{"vcs.revision": revision, "vcs.time": "2026-11-26T19:48:45Z", "vcs.modified": "true"}
	for _, tc := range []struct {
		name         string
		info         *debug.BuildInfo
		wantVersion  string
		wantModified bool
	}{
		{"a tagged commit", buildInfo("v1.2.0", commit), "v1.2.0", false},
		{"a commit between tags, as go build stamps it", buildInfo("v0.0.0-20261126194845-7fe32f0abcde", commit), "v0.0.0-20261126194845-7fe32f0abcde", false},
		{"a modified tree, as go build stamps it", buildInfo("v0.0.0-20261126194845-7fe32f0abcde+dirty", dirty), "v0.0.0-20261126194845-7fe32f0abcde-dirty", true},
		{"a build without a module version (go run)", buildInfo("(devel)", commit), "v0.0.0-20261126194845-7fe32f0abcde", false},
		{"a modified tree without a module version", buildInfo("(devel)", dirty), "v0.0.0-20261126194845-7fe32f0abcde-dirty", true},
		{"a build outside git", buildInfo("(devel)", nil), "unknown", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromBuildInfo(tc.info)
			if got.Version != tc.wantVersion || got.Modified != tc.wantModified {
				t.Errorf("version %q, modified %v; want %q, %v", got.Version, got.Modified, tc.wantVersion, tc.wantModified)
			}
			if got.IronCoreAPI != "v0.5.0" || got.CloudProvider != "v0.35.4" || got.GoVersion != "go1.26.8" {
				t.Errorf("modules: %+v; want the IronCore API v0.5.0 and the replaced cloud-provider v0.35.4", got)
			}
			if tc.info.Settings != nil && got.Commit != revision {
				t.Errorf("commit %q, want %q", got.Commit, revision)
			}
		})
	}
}

func TestInfoPrints(t *testing.T) {
	info := FromBuildInfo(buildInfo("v1.2.0", map[string]string{"vcs.revision": "abc", "vcs.time": "2026-11-26T19:48:45Z"}))
	if first, _, _ := strings.Cut(info.String(), "\n"); first != "ironcore-cloud-controller-manager v1.2.0" {
		t.Errorf("first line %q", first)
	}
	var decoded Info
	if err := json.Unmarshal([]byte(info.JSON()), &decoded); err != nil || decoded != info {
		t.Errorf("JSON round trip: %+v, %v; want %+v", decoded, err, info)
	}
}

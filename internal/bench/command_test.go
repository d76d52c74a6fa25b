package bench

import (
	"os/exec"
	"strings"
	"testing"
)

// The command a report prints gives the lab program back each flag's value: the user's shell
// reads BENCH_FLAGS='...', and the Makefile's recipe reads $(BENCH_FLAGS) as shell words.
func TestReproduceCommandKeepsEachValue(t *testing.T) {
	values := []string{"300", "5m0s", "bin/reference-ccm", "", "--cluster-name=lab --v=2",
		`it's "quoted"`, `$HOME and $(date) and ` + "`id`", `back\slash`, "tab\there", "a*b?[c] ;&|<>#~"}
	for _, value := range values {
		command := reproduceCommand([]string{ShellFlag("ccm-args", value), ShellFlag("nodes", "3")})
		assignment, ok := strings.CutPrefix(command, "make bench ")
		if !ok {
			t.Fatalf("command %q does not start with make bench", command)
		}
		// The recipe expands $(BENCH_FLAGS) as text into a shell command line: eval does the same.
		script := assignment + `; eval "printf '%s\n' $BENCH_FLAGS"`
		out, err := exec.Command("sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("value %q: sh -c %q: %v", value, script, err)
		}
		if got, want := string(out), "-ccm-args="+value+"\n-nodes=3\n"; got != want {
			t.Errorf("value %q: the lab program would get %q, want %q (command %s)", value, got, want, command)
		}
	}
}

// Plain values are written as they are, so that the commands stay readable.
func TestShellFlagLeavesPlainValuesUnquoted(t *testing.T) {
	for value, want := range map[string]string{
		"300":                     "-nodes=300",
		"bin/reference-ccm":       "-nodes=bin/reference-ccm",
		"--use-nic-selector=true": "-nodes=--use-nic-selector=true",
		"a b":                     `-nodes="a b"`,
	} {
		if got := ShellFlag("nodes", value); got != want {
			t.Errorf("ShellFlag(%q) = %q, want %q", value, got, want)
		}
	}
}

package bench

import "strings"

// ShellFlag writes a flag of the lab program as a shell reads it in BENCH_FLAGS, which the
// Makefile's recipe expands unquoted: a value with anything but plain characters is put in
// double quotes, inside which the shell's special characters are escaped.
func ShellFlag(name, value string) string {
	plain := value != "" && strings.Trim(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_=,./:@%+-") == ""
	if plain {
		return "-" + name + "=" + value
	}
	escaped := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`").Replace(value)
	return "-" + name + `="` + escaped + `"`
}

// reproduceCommand is the make command that repeats a run with the given flags (each from
// ShellFlag). The flags go in single quotes; a single quote among them ends the quoting, is
// escaped, and starts it again.
func reproduceCommand(flags []string) string {
	return "make bench BENCH_FLAGS='" + strings.ReplaceAll(strings.Join(flags, " "), "'", `'\''`) + "'"
}

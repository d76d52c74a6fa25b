package dryrun

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// section is a part of the report: the writes it holds, in the order an operator reads them
// before a switch, what matters most first.
type section struct {
	title string
	holds func(Write) bool
}

func sections() []section {
	return []section{
		{"Deletions: each should be expected before a switch", func(w Write) bool { return w.Verb == "delete" || w.Verb == "deletecollection" }},
		{"LoadBalancers created", func(w Write) bool {
			return w.Resource == "loadbalancers.networking.ironcore.dev" && slices.Equal(w.Changes, []string{"created"})
		}},
		{"Service addresses and status", func(w Write) bool { return w.Resource == "services" && w.Subresource == "status" }},
		{"LoadBalancer routings: which Nodes go in and out", func(w Write) bool { return w.Resource == "loadbalancerroutings.networking.ironcore.dev" }},
		{"LoadBalancers changed", func(w Write) bool { return w.Resource == "loadbalancers.networking.ironcore.dev" }},
		{"NetworkInterfaces: target labels and pod CIDR prefixes", func(w Write) bool { return w.Resource == "networkinterfaces.networking.ironcore.dev" }},
		{"Nodes: labels, taints, addresses and conditions", func(w Write) bool { return w.Resource == "nodes" }},
		{"Other writes", func(w Write) bool { return w.Resource != "events" }},
		{"Events it would record", func(Write) bool { return true }},
	}
}

// Render writes the report for an operator: a summary line per section, then each write with
// what it changes and why.
func Render(out io.Writer, report Report) error { return RenderFirst(out, report, 0) }

// RenderFirst is Render with at most first writes of each section, if first is positive.
func RenderFirst(out io.Writer, report Report, first int) error {
	parts := sections()
	held := make([][]Write, len(parts))
	for _, write := range report.Writes {
		for i, part := range parts {
			if part.holds(write) {
				held[i] = append(held[i], write)
				break
			}
		}
	}
	var b strings.Builder
	if len(report.Writes) == 0 {
		b.WriteString("No writes: running this CCM for real would change nothing so far.\n")
	} else {
		b.WriteString("What this CCM would write, had it not run dry:\n")
		for i, part := range parts {
			if len(held[i]) > 0 {
				fmt.Fprintf(&b, "  %4d  %s\n", len(held[i]), part.title)
			}
		}
	}
	for i, part := range parts {
		if len(held[i]) == 0 {
			continue
		}
		writes := held[i]
		if part.title == "Events it would record" {
			// Warnings first.
			slices.SortStableFunc(writes, func(a, b Write) int {
				return strings.Compare(eventType(b), eventType(a))
			})
		}
		fmt.Fprintf(&b, "\n%s (%d)\n", part.title, len(writes))
		for j, write := range writes {
			if first > 0 && j == first {
				fmt.Fprintf(&b, "  ... and %d more\n", len(writes)-first)
				break
			}
			renderWrite(&b, write)
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}

func renderWrite(b *strings.Builder, w Write) {
	resource := w.Resource
	if w.Subresource != "" {
		resource += "/" + w.Subresource
	}
	fmt.Fprintf(b, "- %s %s %s", w.Verb, resource, w.Object())
	if w.Attempts > 1 {
		fmt.Fprintf(b, " (tried %d times)", w.Attempts)
	}
	if w.Client != "" {
		fmt.Fprintf(b, " by %s", w.Client)
	}
	b.WriteString("\n")
	if w.Reason != "" {
		fmt.Fprintf(b, "    why: %s\n", w.Reason)
	}
	if w.Resource == "events" {
		fmt.Fprintf(b, "    %s\n", w.Change)
		return
	}
	for _, change := range w.Changes {
		fmt.Fprintf(b, "    %s\n", change)
	}
	if len(w.Changes) == 0 && !w.Truncated {
		b.WriteString("    no change: the object is so already\n")
	}
	out := DestinationsOut(w.Changes)
	for _, target := range out {
		if why := w.Excluded[target]; why != "" {
			fmt.Fprintf(b, "      %s out: %s\n", target, why)
		}
	}
	for _, target := range slices.Sorted(maps.Keys(w.Excluded)) {
		if !slices.Contains(out, target) {
			fmt.Fprintf(b, "    not a target: %s: %s\n", target, w.Excluded[target])
		}
	}
	if w.Truncated {
		b.WriteString("    (the change is too long to keep)\n")
	}
}

func eventType(w Write) string {
	if strings.Contains(string(w.Change), `"type":"Warning"`) {
		return "Warning"
	}
	return "Normal"
}

package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// none stands for an empty cell or list, as kubectl prints it.
const none = "<none>"

// maxTargetsShown keeps a LoadBalancer's row readable; the JSON output lists every target.
const maxTargetsShown = 3

// Write prints the report in the format, OutputTable or OutputJSON.
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case OutputJSON:
		data, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case OutputTable:
		return r.writeTables(w)
	default:
		return fmt.Errorf("unknown output format %q", format)
	}
}

// writeTables prints a summary, then one table per section, each followed by the details of
// what differs: the table says where to look, the details say what and what happens next.
func (r *Report) writeTables(w io.Writer) error {
	fmt.Fprintf(w, "Cluster %s, IronCore namespace %s, Network %s\n%s\n", r.Cluster, r.Namespace, r.Network, r.summary())
	for _, section := range []func(io.Writer) error{r.writeNodes, r.writeServices, r.writeRoutes, r.writeOrphans, r.writeRetained, r.writeConflicts} {
		fmt.Fprintln(w)
		if err := section(w); err != nil {
			return err
		}
	}
	return nil
}

func (r *Report) summary() string {
	nodesWithIssues, servicesWithIssues := 0, 0
	for _, node := range r.Nodes {
		if len(node.Issues) > 0 {
			nodesWithIssues++
		}
	}
	for _, service := range r.Services {
		if len(service.Issues) > 0 {
			servicesWithIssues++
		}
	}
	states := map[string]int{}
	for _, route := range r.Routes {
		states[route.State]++
	}
	return fmt.Sprintf("%s (%d with issues), %s of type LoadBalancer (%d with issues), %s (%d missing, %d extra), %s, %s, %s",
		count(len(r.Nodes), "Node", "Nodes"), nodesWithIssues, count(len(r.Services), "Service", "Services"), servicesWithIssues,
		count(len(r.Routes), "route", "routes"), states[RouteMissing], states[RouteExtra],
		count(len(r.Orphans), "orphaned LoadBalancer", "orphaned LoadBalancers"), count(len(r.Retained), "retained LoadBalancer", "retained LoadBalancers"),
		count(len(r.Conflicts), "ownership conflict", "ownership conflicts"))
}

func count(n int, singular, plural string) string {
	if n == 1 {
		return "1 " + singular
	}
	return fmt.Sprintf("%d %s", n, plural)
}

func (r *Report) writeNodes(w io.Writer) error {
	err := writeSection(w, "NODES", none, "NODE\tPROVIDER-ID\tMACHINE\tPOOL/ZONE\tSTATE\tNODE ADDRESSES\tMACHINE ADDRESSES\tISSUES", r.Nodes, func(node Node) []string {
		machine := cell(node.Machine)
		if node.Machine != "" && node.MatchedBy != MatchedByProviderID {
			machine += " (by " + node.MatchedBy + ")"
		}
		poolZone := none
		if node.MachinePool != "" || node.Zone != "" {
			poolZone = cell(node.MachinePool) + "/" + cell(node.Zone)
		}
		machineAddresses := formatAddresses(node.MachineAddresses)
		if len(node.MachineAddresses) > 0 && sameAddresses(node.NodeAddresses, node.MachineAddresses) {
			machineAddresses = "same"
		}
		return []string{node.Name, cell(node.ProviderID), machine, poolZone, cell(node.MachineState),
			formatAddresses(node.NodeAddresses), machineAddresses, issueCodes(node.Issues)}
	})
	if err != nil {
		return err
	}
	for _, node := range r.Nodes {
		writeIssues(w, node.Name, node.Issues)
	}
	return nil
}

func (r *Report) writeServices(w io.Writer) error {
	err := writeSection(w, "LOADBALANCERS", none, "SERVICE\tLOADBALANCER\tTYPE\tSERVICE IPS\tLOADBALANCER IPS\tTARGETS\tOWNER\tISSUES", r.Services, func(service Service) []string {
		owner := none
		if service.Owner != nil {
			owner = service.Owner.Cluster + "/" + service.Owner.UID
		}
		return []string{service.Namespace + "/" + service.Name, cell(service.LoadBalancer), cell(service.Type),
			joinOrNone(service.ServiceIPs), joinOrNone(service.LoadBalancerIPs), formatTargets(service), owner, issueCodes(service.Issues)}
	})
	if err != nil {
		return err
	}
	for _, service := range r.Services {
		writeIssues(w, service.Namespace+"/"+service.Name, service.Issues)
		for i, left := range service.LeftOut {
			if i == maxTargetsShown {
				fmt.Fprintf(w, "  %s/%s: %d more Nodes are not targets (-o json lists them)\n", service.Namespace, service.Name, len(service.LeftOut)-maxTargetsShown)
				break
			}
			fmt.Fprintf(w, "  %s/%s: Node %s is not a target: %s\n", service.Namespace, service.Name, left.Node, left.Reason)
		}
	}
	return nil
}

func formatTargets(service Service) string {
	if len(service.Targets) == 0 {
		return none
	}
	parts := make([]string, 0, maxTargetsShown+1)
	for i, target := range service.Targets {
		if i == maxTargetsShown {
			parts = append(parts, fmt.Sprintf("+%d more", len(service.Targets)-maxTargetsShown))
			break
		}
		var notes []string
		if target.Node != "" {
			notes = append(notes, target.Node)
		}
		if !target.Routed {
			notes = append(notes, "not routed")
		}
		part := cell(target.NetworkInterface)
		if len(notes) > 0 {
			part += "(" + strings.Join(notes, ",") + ")"
		}
		parts = append(parts, part)
	}
	return service.TargetsFrom + ":" + strings.Join(parts, ",")
}

func (r *Report) writeRoutes(w io.Writer) error {
	err := writeSection(w, "ROUTES", "no Node has pod CIDRs and no managed route exists", "NODE\tNETWORKINTERFACE\tCIDR\tSTATE", r.Routes, func(route Route) []string {
		return []string{cell(route.Node), cell(route.NetworkInterface), route.CIDR, route.State}
	})
	if err != nil {
		return err
	}
	for _, route := range r.Routes {
		if route.Detail != "" {
			fmt.Fprintf(w, "  %s %s: %s: %s\n", cell(route.Node), route.CIDR, route.State, route.Detail)
		}
	}
	return nil
}

func (r *Report) writeOrphans(w io.Writer) error {
	return writeSection(w, "ORPHANED LOADBALANCERS", none, "LOADBALANCER\tRECORDED SERVICE\tSERVICE UID\tIPS\tREASON", r.Orphans, func(orphan Orphan) []string {
		return []string{orphan.LoadBalancer, orphan.Owner.Namespace + "/" + orphan.Owner.Name, orphan.Owner.UID, joinOrNone(orphan.IPs), orphan.Reason}
	})
}

func (r *Report) writeConflicts(w io.Writer) error {
	return writeSection(w, "OWNERSHIP CONFLICTS", none, "LOADBALANCER\tWANTED BY\tOWNED BY", r.Conflicts, func(conflict Conflict) []string {
		return []string{conflict.LoadBalancer,
			fmt.Sprintf("%s/%s (UID %s) of cluster %s", conflict.ServiceNamespace, conflict.ServiceName, conflict.ServiceUID, r.Cluster),
			fmt.Sprintf("%s/%s (UID %s) of cluster %s", cell(conflict.Owner.Namespace), cell(conflict.Owner.Name), cell(conflict.Owner.UID), cell(conflict.Owner.Cluster))}
	})
}

// writeSection prints a section's title, then empty if there are no rows, else a table of the
// header (its columns separated by tabs) and a line per row with the cells row makes of it.
func writeSection[T any](w io.Writer, title, empty, header string, rows []T, row func(T) []string) error {
	fmt.Fprintln(w, title)
	if len(rows) == 0 {
		fmt.Fprintln(w, empty)
		return nil
	}
	table := newTable(w)
	fmt.Fprintln(table, header)
	for _, r := range rows {
		fmt.Fprintln(table, strings.Join(row(r), "\t"))
	}
	return table.Flush()
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func cell(value string) string {
	if value == "" {
		return none
	}
	return value
}

func issueCodes(issues []Issue) string {
	if len(issues) == 0 {
		return none
	}
	codes := make([]string, 0, len(issues))
	for _, issue := range issues {
		codes = append(codes, issue.Code)
	}
	return strings.Join(codes, ",")
}

func writeIssues(w io.Writer, name string, issues []Issue) {
	for _, issue := range issues {
		fmt.Fprintf(w, "  %s: %s: %s\n", name, issue.Code, issue.Detail)
	}
}

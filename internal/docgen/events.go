package docgen

// eventsCatalog renders docs/events.md from EventReasons.
func eventsCatalog() []byte {
	d := newDocument("Events")
	d.paragraph("Every reason of the Kubernetes events the CCM records, with what to do about it (`kubectl describe` shows " +
		"an object's events). Reasons are stable: alerts and runbooks may match on them. The upstream controllers in the " +
		"binary record events of their own, such as `EnsuringLoadBalancer` and `SyncLoadBalancerFailed`, whose message " +
		"then carries the CCM's error.")
	reasons := EventReasons()
	rows := make([][]string, 0, len(reasons))
	for _, reason := range reasons {
		rows = append(rows, []string{code(reason.Reason), reason.Type, reason.Object, reason.Controller, reason.When, reason.Action})
	}
	d.table([]string{"Reason", "Type", "On", "Recorded by", "When", "What to do"}, rows)
	return d.bytes()
}

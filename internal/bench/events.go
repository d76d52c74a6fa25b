package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// countWarnings counts the target cluster's Warning events about the burst's Nodes and
// Services. The upstream service controller records one for every failed sync, so they show
// the retries a Service went through before it had its address.
func countWarnings(ctx context.Context, stack *testenv.Stack, nodes, services int) (WarningEvents, error) {
	events, err := stack.TargetClientset.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("type", corev1.EventTypeWarning).String(),
	})
	if err != nil {
		return WarningEvents{}, fmt.Errorf("list Warning events in the target cluster: %w", err)
	}
	burst := map[corev1.ObjectReference]bool{}
	for i := range nodes {
		burst[corev1.ObjectReference{Kind: "Node", Name: nodeName(i)}] = true
	}
	for i := range services {
		burst[corev1.ObjectReference{Kind: "Service", Namespace: metav1.NamespaceDefault, Name: serviceName(i)}] = true
	}
	return warningEvents(events.Items, burst), nil
}

// warningEvents sums the Warning events whose object is in burst (compared by kind, namespace
// and name; Node events may name the namespace "default" or none) by kind and reason.
func warningEvents(events []corev1.Event, burst map[corev1.ObjectReference]bool) WarningEvents {
	type group struct {
		kind, reason string
	}
	counts := map[group]*ReasonCount{}
	objects := map[group]map[string]bool{}
	var result WarningEvents
	for _, event := range events {
		ref := corev1.ObjectReference{Kind: event.InvolvedObject.Kind, Namespace: event.InvolvedObject.Namespace, Name: event.InvolvedObject.Name}
		if ref.Kind == "Node" {
			ref.Namespace = ""
		}
		if event.Type != corev1.EventTypeWarning || !burst[ref] {
			continue
		}
		g := group{kind: ref.Kind, reason: event.Reason}
		if counts[g] == nil {
			counts[g] = &ReasonCount{Kind: g.kind, Reason: g.reason}
			objects[g] = map[string]bool{}
		}
		n := occurrences(event)
		counts[g].Events++
		counts[g].Occurrences += n
		objects[g][ref.Namespace+"/"+ref.Name] = true
		result.Events++
		result.Occurrences += n
	}
	for g, count := range counts {
		count.Objects = len(objects[g])
		result.ByReason = append(result.ByReason, *count)
	}
	slices.SortFunc(result.ByReason, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Occurrences, a.Occurrences), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Reason, b.Reason))
	})
	return result
}

// occurrences is how often an event happened: the event recorder folds repeats into one Event
// and counts them, in count (core/v1) or series.count (events.k8s.io).
func occurrences(event corev1.Event) int {
	n := max(1, int(event.Count))
	if event.Series != nil {
		n = max(n, int(event.Series.Count))
	}
	return n
}

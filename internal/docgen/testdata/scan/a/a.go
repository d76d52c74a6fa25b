package a

import (
	corev1 "k8s.io/api/core/v1"

	"example.com/scan/b"
)

const (
	ReasonLiteral = "Literal"
	reasonPrefix  = "Prefixed"
	ReasonAliased = b.ReasonImported + "Aliased"
)

type problem struct{ reason, message string }

func record(r recorder, obj any, name string, p *problem) {
	r.Eventf(obj, corev1.EventTypeWarning, ReasonLiteral, "x")
	r.Event(obj, corev1.EventTypeNormal, reasonPrefix+"Concat", "x")
	r.Event(obj, "Warning", b.ReasonImported, "x")
	r.AnnotatedEventf(obj, nil, corev1.EventTypeWarning, "Annotated", "x")
	r.Event(obj, corev1.EventTypeWarning, p.reason, p.message)
	r.Event(obj, corev1.EventTypeWarning, name, "dynamic")
	r.Event("not a recorder call")
	_ = &problem{reason: "Carried", message: "m"}
	_ = &problem{reason: name}
	_ = []problem{{reason: "CarriedElided"}}
	_ = note{reason: "NotCarried"}
	_ = b.Note{Reason: "NotCarriedEither"}
}

// note has a field named like problem's that reaches no recording call.
type note struct{ reason string }

func recordAcross(r recorder, obj any, q *b.Problem, notes []note) {
	r.Event(obj, corev1.EventTypeNormal, q.Reason, q.Message)
	for _, n := range notes {
		r.Event(obj, corev1.EventTypeWarning, n.reason, "a local is not followed")
	}
	_ = map[string]*b.Problem{"x": {Reason: b.ReasonImported + "Across"}}
}

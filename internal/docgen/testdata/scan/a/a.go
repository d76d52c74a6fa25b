package a

import (
	corev1 "k8s.io/api/core/v1"

	"example.com/scan/b"
)

const (
	ReasonLiteral = "Literal"
	reasonPrefix  = "Prefixed"
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
}

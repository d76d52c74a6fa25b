package a

// ReasonAliased is declared in a.go, which imports package b; this file does not.
func recordAliased(r recorder, obj any) {
	r.Event(obj, "Warning", ReasonAliased, "x")
}

package b

const ReasonImported = "Imported"

// Problem carries reasons to a recording call of package a.
type Problem struct{ Reason, Message string }

// Note has a field named like Problem's that reaches no recording call.
type Note struct{ Reason string }

func problems() []Problem {
	_ = Note{Reason: "NotCarried"}
	return []Problem{{Reason: "CarriedFromB", Message: "m"}, {Reason: ReasonImported}}
}

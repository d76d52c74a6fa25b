package b

const ReasonImported = "Imported"

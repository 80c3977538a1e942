package sqlflight

// MaxNameLen is the longest a statement's name= may be, in bytes (the
// annotation grammar's bound: TestExportedConstantsAreTheMechanisms').
const MaxNameLen = 128

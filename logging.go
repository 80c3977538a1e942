package sqlflight

import (
	"github.com/sqlflight/sqlflight/internal/errtext"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
	"github.com/sqlflight/sqlflight/internal/wire"
)

// What a log line may say about an error: no log line, warning or Explain
// carries an error's text (it may hold the values of a statement's
// arguments). errText describes an error by its SQLSTATE and class, or by
// its Go type and, for the errors this package knows, a fixed description
// (errtext.Describer).

// errText describes errors for logs, Explain and the change feed's state.
// Its Known are the errors whose text is this package's own and holds no
// data: the description of an error that wraps one of them.
var errText = errtext.Describer{Known: []error{
	ErrOriginTimeout, ErrOriginPanicked, ErrOverloaded, ErrCircuitOpen, ErrBadAnnotation, ErrBadDSN,
	errWaitExpired, errLeasedElsewhere, shared.ErrFormat, shared.ErrUnknownScanType, wire.ErrCorrupt, wire.ErrVersion,
	ErrNoSharedSecret, seal.ErrForged, seal.ErrFormat,
}}

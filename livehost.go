package sqlflight

import (
	"net/http"

	"github.com/sqlflight/sqlflight/internal/livepage"
)

// LivePageOptions configure the live page of HandlerWith.
type LivePageOptions struct {
	// AllowedHosts are the host names (without port, compared without
	// regard to case) the page answers besides localhost and IP literals.
	// A request whose Host header names any other host is refused with 421
	// Misdirected Request: a web page in an operator's browser cannot read
	// the live page through DNS rebinding.
	AllowedHosts []string

	// ShowArguments shows the application's values on the page as they
	// are: the arguments of the statements' hottest keys, the literals of
	// the statement texts (strings, numbers, comments), and the
	// fingerprints of texts that hold literals (an unkeyed hash of the
	// text, from which a literal can be guessed). Without it (the default)
	// the page shows, for each of them, a keyed hash: "#" and 12 hex
	// digits of an HMAC-SHA256 under a random key of the Shield, so that
	// one value shows as one hash for as long as the Shield runs, and
	// nobody can find a value from its hash by hashing guesses.
	//
	// The values are other users' data (session tokens, e-mail addresses,
	// tenants' ids): set it only where whoever reaches the page may read
	// every tenant's rows. Shield.Statements and Shield.Advice, seen only
	// by the application, always hold them.
	ShowArguments bool
}

// HandlerWith is Handler with options.
func HandlerWith(s *Shield, o LivePageOptions) http.Handler {
	return livepage.New(pageSource(s), livepage.Options(o))
}

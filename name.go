package sqlflight

import (
	"errors"
	"fmt"
)

// MaxNameLen is the longest a statement's name= may be, in bytes.
const MaxNameLen = 128

// checkName reports whether n is a valid name= of an annotation: 1 to
// MaxNameLen bytes of ASCII letters, digits and _ - . : /. Anything else
// makes the annotation malformed (a label of metrics and logs stays short
// and plain).
func checkName(n string) error {
	if n == "" {
		return errors.New("empty name")
	}
	if len(n) > MaxNameLen {
		return fmt.Errorf("name longer than %d bytes", MaxNameLen)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':' || c == '/') {
			return fmt.Errorf("name holds %q: only letters, digits and _ - . : / are allowed", c)
		}
	}
	return nil
}

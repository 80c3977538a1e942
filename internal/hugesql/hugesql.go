// Package hugesql builds statements of several megabytes for the tests and
// benchmarks of the scanner and the driver.
package hugesql

import (
	"strconv"
	"strings"
)

// In returns a SELECT of table with an IN list of numbers, at least n
// bytes long.
func In(table string, n int) string {
	return build("SELECT id FROM "+table+" WHERE id IN (", ", ", ")", n, func(i int) string {
		return strconv.Itoa(1_000_000 + i)
	})
}

// Insert returns a multi-row INSERT … VALUES of numbers and strings into
// table, at least n bytes long, its rows on lines of their own.
func Insert(table string, n int) string {
	return build("INSERT INTO "+table+" (id, email) VALUES ", ",\n  ", "", n, func(i int) string {
		return "(" + strconv.Itoa(i) + ", 'user" + strconv.Itoa(i) + "@example.com')"
	})
}

func build(head, sep, tail string, n int, elem func(int) string) string {
	var b strings.Builder
	b.Grow(n + 64)
	b.WriteString(head)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(elem(i))
	}
	b.WriteString(tail)
	return b.String()
}

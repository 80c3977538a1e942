package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
)

// explainStdin is where explain reads a statement given as "-" or not at all; tests
// replace it.
var explainStdin io.Reader = os.Stdin

// runExplain is the explain subcommand: it tells how a default Shield would
// route one statement, for a person or, with -json, as an Explanation.
func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the explanation as indented JSON")
	dsn := fs.String("dsn", "", "a PostgreSQL DSN (postgres://…): ask the server for its verdict (functions and their volatility, base tables, write closure)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sqlflight explain [-json] [-dsn postgres://…] ["<SQL>" | -]

Explain tells how sqlflight would route one statement on a clean connection
outside a transaction, with the default options: whether identical in-flight
calls share one query, whether the result is cached, and why not. With no
statement or "-", the statement is read from standard input.

Flags may come before or after the statement. A statement may begin with a
"-- sqlflight: …" annotation: an argument that does not look like a flag
(a space or a newline in its name, "--" followed by a space) is the
statement; after a "--" argument, everything is.

Without -dsn the verdict is the scanner's alone (provisional): the server
has the last word on what a statement really calls and reads. With -dsn the
statement is planned on that server (never run) and the verdict is final.

Flags:
`)
		fs.PrintDefaults()
	}
	flags, rest := splitArgs(fs, args)
	if err := fs.Parse(flags); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage // the flag package has printed the error and usage
	}
	var query string
	switch {
	case len(rest) > 1:
		return fmt.Errorf("%w: want one statement, got %d arguments %s (quote the SQL as one argument)",
			errUsage, len(rest), argList(rest))
	case len(rest) == 1 && rest[0] != "-":
		query = rest[0]
	default:
		b, err := io.ReadAll(explainStdin)
		if err != nil {
			return fmt.Errorf("reading the statement from standard input: %w", err)
		}
		query = string(b)
	}
	query = strings.TrimSpace(query)
	if query == "" {
		return fmt.Errorf("%w: no statement to explain", errUsage)
	}

	s := sqlflight.New()
	defer s.Close()
	var x sqlflight.Explanation
	if *dsn == "" {
		x = s.Explain(ctx, query)
	} else {
		c, err := s.Wrap(stdlib.GetDefaultDriver()).(driver.DriverContext).OpenConnector(*dsn)
		if err != nil {
			return fmt.Errorf("%w: -dsn: %v", errUsage, err)
		}
		db := sql.OpenDB(c)
		defer db.Close()
		if x, err = sqlflight.ExplainDB(ctx, db, query); err != nil {
			return fmt.Errorf("asking the server: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(x)
	}
	return writeExplanation(stdout, x)
}

// splitArgs separates the flags of fs in args, wherever they are, from the
// other arguments: the statement, "-", and everything after a "--"
// argument. An argument that begins with "-" is a flag only if it looks like
// one ("-name" or "--name", maybe "=value", the name made of letters,
// digits, "_" and "-"): SQL that begins with a "-- sqlflight: …" annotation
// or a "--comment" line is not mistaken for a flag. The value of a
// non-boolean flag given as the next argument goes with it.
func splitArgs(fs *flag.FlagSet, args []string) (flags, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, append(rest, args[i+1:]...)
		}
		name, hasValue, ok := flagName(a)
		if !ok {
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		if f := fs.Lookup(name); f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, rest
}

// flagName returns the name of the flag arg spells, and whether it carries
// its value ("-name=value"); ok is false when arg does not look like a flag.
func flagName(arg string) (name string, hasValue, ok bool) {
	if len(arg) < 2 || arg[0] != '-' {
		return "", false, false
	}
	name = strings.TrimPrefix(arg[1:], "-")
	name, _, hasValue = strings.Cut(name, "=")
	if name == "" || name[0] == '-' {
		return "", false, false
	}
	for _, r := range name {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return "", false, false
		}
	}
	return name, hasValue, true
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// argList quotes the first words of each argument, for an error message.
func argList(args []string) string {
	var out []string
	for _, a := range args {
		if r := []rune(a); len(r) > 20 {
			a = string(r[:20]) + "…"
		}
		out = append(out, strconv.Quote(a))
	}
	return "(" + strings.Join(out, ", ") + ")"
}

// writeExplanation prints x for a person.
func writeExplanation(w io.Writer, x sqlflight.Explanation) error {
	var b strings.Builder
	line := func(label, format string, a ...any) {
		fmt.Fprintf(&b, "%-12s %s\n", label+":", fmt.Sprintf(format, a...))
	}
	kind := x.Kind
	if x.Statements > 1 {
		kind += fmt.Sprintf(" (%d statements)", x.Statements)
	}
	if x.ReadOnly {
		kind += ", read-only"
	}
	line("kind", "%s", kind)
	if x.Shared {
		line("shared", "yes: identical in-flight calls run one query (%s)", x.Verdict)
	} else {
		reason := dedupe(orUnknown(x.Reason))
		if x.Bypass != "" && !strings.HasPrefix(reason, x.Bypass) {
			// Not a write, yet counted with writes: not known to be read-only.
			reason += fmt.Sprintf(" (not known to be read-only: counted under bypass reason %q)", x.Bypass)
		}
		line("shared", "no: %s", reason)
	}
	switch {
	case x.Cached:
		line("cached", "yes: %s", cacheWindow(x.Policy))
	case !x.Shared:
		line("cached", "no: not shared")
	default:
		line("cached", "no: %s", strings.TrimPrefix(orUnknown(x.Reason), "not cached: "))
	}
	switch {
	case x.Fleet:
		line("fleet", "yes: with a shared tier, one query for every instance")
	case x.Cached:
		line("fleet", "no: its tables are not known (name them with tables=)")
	}
	switch {
	case x.Batch != "":
		line("batched", "yes: the reads of many keys that miss together run as one statement, by %s", x.Batch)
	case x.BatchReason != "":
		line("batched", "no: %s", x.BatchReason)
	}
	if x.Error != "" {
		line("error", "%s", x.Error)
	}
	if x.Annotation != "" {
		line("annotation", "%s", x.Annotation)
	}
	tables := list(x.Tables)
	if !x.TablesKnown {
		tables += " (not known for certain)"
	}
	line("reads", "%s", tables)
	line("writes", "%s", list(x.Writes))
	line("functions", "%s", functions(x.Functions, x.Unknown))
	if x.Server != nil {
		var fs []string
		for _, f := range x.Server.Functions {
			s := f.Schema + "." + f.Name + " (" + f.Volatility
			if f.PerSession {
				s += ", per-session"
			}
			if f.Opaque {
				s += ", opaque body"
			}
			fs = append(fs, s+")")
		}
		line("server", "verdict of the server: calls %s", list(fs))
	} else if x.Provisional != "" {
		line("server", "%s", x.Provisional)
	}
	switch {
	case x.WritesAll:
		line("changes", "any table (DDL, triggers, rules, volatile functions or unknown targets)")
	case len(x.WriteClosure) > 0:
		line("changes", "%s", list(x.WriteClosure))
	}
	line("normalized", "%s", x.Normalized)
	if x.Shape != "" && x.Shape != x.Normalized {
		line("shape", "%s", x.Shape)
	}
	line("fingerprint", "%s", x.Fingerprint)
	pol := policyFields(x.Policy)
	if len(pol) == 0 {
		line("policy", "defaults (coalesce shareable reads, cache nothing)")
	} else {
		line("policy", "%s", strings.Join(pol, " "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orUnknown(s string) string {
	if s == "" {
		return "(no reason given)"
	}
	return s
}

// dedupe drops a repeated leading word from a reason ("write: write:
// UPDATE" reads "write: UPDATE").
func dedupe(reason string) string {
	head, rest, ok := strings.Cut(reason, ": ")
	if ok && strings.HasPrefix(rest, head+": ") {
		return rest
	}
	return reason
}

func cacheWindow(p sqlflight.Policy) string {
	s := "fresh for " + p.Soft.String()
	if p.Hard > p.Soft {
		s += ", then served stale while refreshed up to " + p.Hard.String()
	}
	return s
}

func list(xs []string) string {
	if len(xs) == 0 {
		return "-"
	}
	return strings.Join(xs, ", ")
}

// functions lists fs, marking those in unknown.
func functions(fs, unknown []string) string {
	if len(fs) == 0 && len(unknown) == 0 {
		return "-"
	}
	isUnknown := make(map[string]bool, len(unknown))
	for _, u := range unknown {
		isUnknown[u] = true
	}
	seen := make(map[string]bool, len(fs))
	var out []string
	for _, f := range fs {
		seen[f] = true
		if isUnknown[f] {
			f += " (unknown: not vouched for)"
		}
		out = append(out, f)
	}
	for _, u := range unknown {
		if !seen[u] {
			out = append(out, u+" (unknown: not vouched for)")
		}
	}
	return strings.Join(out, ", ")
}

// policyFields renders the non-zero fields of p as annotation-like words.
func policyFields(p sqlflight.Policy) []string {
	var out []string
	dur := func(name string, d time.Duration) {
		if d != 0 {
			out = append(out, name+"="+d.String())
		}
	}
	num := func(name string, f float64) {
		if f != 0 {
			out = append(out, name+"="+strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	flag := func(name string, on bool) {
		if on {
			out = append(out, name)
		}
	}
	dur("soft", p.Soft)
	dur("hard", p.Hard)
	dur("neg", p.Neg)
	num("jitter", p.Jitter)
	num("beta", p.Beta)
	if p.MaxRows != 0 {
		out = append(out, "maxrows="+strconv.Itoa(p.MaxRows))
	}
	if p.MaxBytes != 0 {
		out = append(out, "maxbytes="+strconv.FormatInt(p.MaxBytes, 10))
	}
	dur("wait", p.Wait)
	dur("timeout", p.Timeout)
	if len(p.Tables) > 0 {
		out = append(out, "tables="+strings.Join(p.Tables, ","))
	}
	if p.Name != "" {
		out = append(out, "name="+p.Name)
	}
	flag("coalesce", p.Coalesce)
	flag("nocoalesce", p.NoCoalesce)
	flag("nocache", p.NoCache)
	flag("off", p.Off)
	return out
}

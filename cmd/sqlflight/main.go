// Command sqlflight is the companion tool of the sqlflight database/sql
// driver.
//
// Usage:
//
//	sqlflight <command> [flags]
//
// Commands:
//
//	demo     play a hot-key herd three ways (no protection, coalescing only,
//	         soft/hard TTL) on an embedded SQLite database, or on Postgres with
//	         -dsn; print a side-by-side table and write an SVG chart
//	explain  tell how sqlflight routes a statement: shared, cached, and why
//	top      show an application's live page (sqlflight.Handler) in the
//	         terminal: top statements, how they were served, the advisor
//	triggers install or remove the change triggers of the NOTIFY feed, or
//	         print their SQL for a migration tool
//
// Run "sqlflight <command> -h" for the flags of a command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// A command is one subcommand of the tool. run receives the arguments after
// the command name; it returns errUsage (wrapped or not) for bad arguments,
// flag.ErrHelp after printing its own help, and any other error for a
// failure.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands in the order usage shows them.
var commands = []command{
	{name: "demo", summary: "play a hot-key herd three ways (SQLite, or Postgres with -dsn); table and SVG chart", run: runDemo},
	{name: "explain", summary: "tell whether a statement would be shared and cached, and why", run: runExplain},
	{name: "top", summary: "an application's live page in the terminal: top statements, hits and misses, advice", run: runTop},
	{name: "triggers", summary: "install|uninstall|sql: the change triggers of the NOTIFY feed", run: runTriggers},
}

// errUsage marks an error caused by how the tool was invoked; it exits 2.
var errUsage = errors.New("usage error")

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.Is(err, errUsage):
			if err != errUsage { // a bare errUsage was explained already
				fmt.Fprintf(stderr, "sqlflight %s: %v\n", c.name, err)
			}
			return exitUsage
		default:
			fmt.Fprintf(stderr, "sqlflight %s: %v\n", c.name, err)
			return exitFailure
		}
	}
	fmt.Fprintf(stderr, "sqlflight: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

// usage prints the list of subcommands.
func usage(w io.Writer) {
	fmt.Fprintf(w, "sqlflight is the companion tool of the sqlflight database/sql driver.\n\n")
	fmt.Fprintf(w, "Usage:\n\n\tsqlflight <command> [flags]\n\nCommands:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun \"sqlflight <command> -h\" for the flags of a command.\n")
}

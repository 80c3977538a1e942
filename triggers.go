package sqlflight

import "github.com/sqlflight/sqlflight/internal/feed"

// NotifyChannel is the channel the triggers notify and the NOTIFY feed
// LISTENs on. No other application should notify it: a payload sqlflight
// cannot read is taken to mean that any table may have changed.
const NotifyChannel = "sqlflight_changes"

// TriggerSchema is the schema that holds the triggers' function. It belongs
// to sqlflight: uninstalling drops it when nothing else is left in it.
const TriggerSchema = "sqlflight"

// InstallTriggersSQL returns the SQL that installs the change triggers on
// tables of schema ("" means public): the named tables, or every table of
// the schema (as it stands when the SQL runs) when none is named, and every
// partition of a partitioned table among them. Table names are spelled as
// the catalog spells them (case-sensitive, unquoted). The SQL creates the
// sqlflight schema and its function if needed and replaces the triggers
// the tables already have, so running it again is harmless: run it again
// after creating tables. Sessions that run it (or the uninstall) at once
// wait for each other. It is a script of several statements for one
// simple-protocol Exec (which PostgreSQL runs as one transaction) or a
// migration tool; it fails, changing nothing, when the schema or a named
// table does not exist or the user may not create triggers on a table.
//
// The triggers are the NOTIFY change feed's source, for servers without
// logical replication: every committed INSERT, UPDATE, DELETE and TRUNCATE
// on the tables sends one notification per statement on NotifyChannel; a
// Shield whose feed is "notify" LISTENs on that channel (on a connection of
// its own) and invalidates what the changes may have changed.
//
// What is installed:
//
//   - a schema of its own, TriggerSchema ("sqlflight"), holding one plpgsql
//     function, sqlflight.notify_changes();
//   - on each table, four statement-level AFTER triggers named
//     sqlflight_insert, sqlflight_update, sqlflight_delete (each with its
//     transition tables: PostgreSQL does not allow transition tables on a
//     trigger for more than one event) and sqlflight_truncate.
//
// The payload of a notification is compact JSON, at most 7999 bytes (NOTIFY's
// limit is 8000):
//
//	{"v":1,"s":"public","t":"items","op":"U","c":["id","name"],
//	 "o":[["5","old name"]],"n":[["5","new name"]]}
//
// s and t are the table's schema and name; op is I, U, D or T; c names the
// reported columns; o and n hold the rows before (UPDATE, DELETE) and after
// (INSERT, UPDATE) the statement, one array of values per row in c's order.
// A value is the column's text form (col::text), null for SQL NULL, or false
// when unknown (its text is longer than 256 bytes). The reported columns are
// the primary key's and every column of a simple type (boolean, numeric,
// date/time, string, enum, network, interval, uuid, and domains over them).
// "r" lists the other tables of a partition tree ([["public","items_2024"],
// …]): a change to a partition is a change to its ancestors, and a statement
// on a partitioned table may change any of its partitions. When the rows do
// not fit (more than 1000 rows on a side, or over 7999 bytes even with the
// key columns alone), the notification degrades to "w":true, the whole table;
// a TRUNCATE is always whole. In the rare case where even that does not fit
// (a partition tree of hundreds of tables), it says "all":true: every table.
// A statement that changed no row sends nothing.
//
// Guarantees: PostgreSQL sends a transaction's notifications when it commits
// and not at all when it rolls back, and delivers the notifications of
// different transactions in commit order. Writes that fire no trigger are
// not seen: tables created after the install (run it again), and changes
// made by TRUNCATE … CASCADE or cascading foreign keys to tables without the
// triggers.
//
// Cost: a notifying transaction's commit takes a global lock, so commits of
// notifying transactions are serialized; see docs/measurements.md for the measured
// write throughput with and without the triggers.
func InstallTriggersSQL(schema string, tables ...string) string {
	return feed.InstallTriggersSQL(schema, tables...)
}

// UninstallTriggersSQL returns the SQL that removes the change triggers
// from tables of schema ("" means public): the named tables and their
// partitions, or every table of the schema when none is named. When no
// table of the database has the triggers any more, it also drops the
// function and the sqlflight schema (the schema only if nothing else is
// left in it). Running it again is harmless; it fails when the schema or a
// named table does not exist. DROP SCHEMA sqlflight CASCADE removes the
// function and every trigger, in every schema, at once.
func UninstallTriggersSQL(schema string, tables ...string) string {
	return feed.UninstallTriggersSQL(schema, tables...)
}

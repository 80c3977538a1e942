// Package rowlevel says which rows of a table a read depends on and which
// rows a write or a committed change touched, so that a write ends only
// the reads of the rows it may have changed.
//
// A read whose statement reads one table only through equality conditions
// on columns of known types (WHERE id = $1, WHERE tenant_id = $1 AND id =
// $2, id IN (…)) depends on the rows those conditions select: [FilterOf]
// finds the conditions of a statement text, [NewReadFilter] keeps those on
// columns whose class the catalog gave (and whose parameters the server
// typed in that class), and [ReadFilter.Deps] tags one read with (table,
// column, value) for each of them ([epoch.RowDeps]). A filter is its
// text's: one made from WHERE id = 4 never tags a read of WHERE id = 5, a
// text of the same statement shape whose verdict it came with;
// [ReadFilter.Fits] tells whether it tags such a text's reads too (its
// conditions hold parameters alone), and [ReadFilter.For] makes that text's
// own filter under the same column classes and parameter types. A write that proves
// which values of which columns the rows it touches have, before and after
// ([WriteOf] for a statement, [Changes] for the changes a feed reports),
// pins those columns to those values ([epoch.RowWrite]); the epochs decide
// which reads that ends.
//
// Values are compared in one canonical text form per column class
// (verdict.CanonArg, verdict.CanonText), so that an argument, a literal in
// the SQL text and the change feed's text agree; only columns of a few
// classes are ever tagged. The classes of a table's columns are remembered
// in [Columns], under the schema generation they were learned in.
//
// Guarantees: nothing is proven that is not: a value that cannot be put in
// canonical form, a parameter the server typed otherwise, a column past
// [MaxPinValues] values, a write whose closure reaches another table
// (cascading foreign keys, inheritance), a change of unknown rows, and a
// table whose column classes are not known for the current generation all
// leave the column unpinned, or the write a write to the whole table
// (false, or the table among [Changes]' tables). A read past [MaxReadTags]
// tags is judged by its table. Every bound ends more reads, never fewer.
//
// What the package does not do: it keeps no epochs and decides nothing
// about what a write ends (package epoch does), and it asks the catalog
// nothing (package verdict does; the caller remembers what it learned).
package rowlevel

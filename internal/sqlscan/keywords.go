package sqlscan

import "strings"

// kwID identifies a keyword the classifier cares about; 0 is "not a keyword". Words that need
// no code of their own share a generic id and differ only by flags.
type kwID uint16

const (
	kwNone kwID = iota

	// generic ids (flags only)
	kwReserved   // a reserved word with no handler of its own
	kwJoinWord   // INNER, CROSS, NATURAL, OUTER …: follow a table ref or an operand
	kwTypeName   // type names that take a modifier: numeric(10,2), varchar(3), timestamp(3) …
	kwConstruct  // special-syntax built-ins: coalesce(…), extract(…), row(…) …
	kwNotCall    // words followed by '(' as syntax, never as a call: OPERATOR(…)
	kwOperatorLk // LIKE, ILIKE, OVERLAPS, LEFT, RIGHT: follow an operand; as a call they are built-ins

	// words with handlers
	kwAbort
	kwAll
	kwAlter
	kwAnalyse
	kwAnalyze
	kwAs
	kwAtomic
	kwAttach
	kwBegin
	kwBinary
	kwBy
	kwCall
	kwCascade
	kwCase
	kwChain
	kwCharacteristics
	kwCheckpoint
	kwClose
	kwCluster
	kwColumns
	kwComment
	kwCommit
	kwConcurrently
	kwConflict
	kwConstraints
	kwCopy
	kwCreate
	kwCurrentCatalog
	kwCurrentDate
	kwCurrentRole
	kwCurrentSchema
	kwCurrentTime
	kwCurrentTimestamp
	kwCurrentUser
	kwCursor
	kwCycle
	kwDeallocate
	kwDeclare
	kwDelete
	kwDetach
	kwDiscard
	kwDistinct
	kwDo
	kwDrop
	kwEnd
	kwEscape
	kwExcept
	kwExecute
	kwExists
	kwExplain
	kwFetch
	kwFilter
	kwFirst
	kwFor
	kwForeign
	kwFreeze
	kwFrom
	kwFull
	kwGlobal
	kwGrant
	kwGroup
	kwGrouping
	kwHaving
	kwIf
	kwImport
	kwIndex
	kwInsert
	kwIntersect
	kwInto
	kwIs
	kwJoin
	kwKey
	kwLateral
	kwLimit
	kwListen
	kwLoad
	kwLocal
	kwLocaltime
	kwLocaltimestamp
	kwLock
	kwMaterialized
	kwMerge
	kwMove
	kwNext
	kwNo
	kwNot
	kwNotify
	kwOf
	kwOffset
	kwOn
	kwOnly
	kwOr
	kwOrder
	kwOrdinality
	kwOver
	kwPartition
	kwPassing
	kwPrepare
	kwPrepared
	kwReassign
	kwRecursive
	kwRefresh
	kwReindex
	kwRelease
	kwRename
	kwRepeatable
	kwReset
	kwReturning
	kwRevoke
	kwRollback
	kwRows
	kwSavepoint
	kwSearch
	kwSecond
	kwSecurity
	kwSelect
	kwSequence
	kwSession
	kwSessionUser
	kwSet
	kwSets
	kwShare
	kwShow
	kwStart
	kwSystemUser
	kwTable
	kwTablesample
	kwTemp
	kwTemporary
	kwThen
	kwTime
	kwTo
	kwTransaction
	kwTruncate
	kwUescape
	kwUnion
	kwUnique
	kwUnlisten
	kwUnlogged
	kwUpdate
	kwUser
	kwUsing
	kwVacuum
	kwValues
	kwVarying
	kwVerbose
	kwView
	kwWhen
	kwWhere
	kwWindow
	kwWith
	kwWork
	kwZone

	kwCount // number of ids
)

// Keyword flags.
const (
	// kfStop: the word cannot be a bare (AS-less) alias after a table reference, so it ends
	// the reference (WHERE, JOIN, SET, …). Postgres' reserved words plus a few that its
	// grammar gives precedence over aliases.
	kfStop uint8 = 1 << iota
	// kfNotCall: the word followed by '(' is syntax or a type modifier, never a function call.
	// Only words that Postgres does not accept as a plain function name carry it (reserved and
	// column-name keywords, and OPERATOR), so that a user function can never hide behind it.
	// Every unreserved and type-or-function-name keyword names a function when followed by
	// '(' unless analyzer.notCall recognises the syntax around it (ORDER BY (…), SET (…) …).
	kfNotCall
	// kfNotRel: the word cannot be a relation name (Postgres' reserved and type-or-function-
	// name keywords). Every other word can, even SET or VALUES: FROM set is a table.
	kfNotRel
)

type keyword struct {
	id    kwID
	flags uint8
}

// keywords maps lower-case words to their id and flags.
var keywords = map[string]keyword{}

// maxKeywordLen is the length of the longest word in keywords.
var maxKeywordLen int

func init() {
	const (
		reserved = kfStop | kfNotCall | kfNotRel
		stop     = kfStop
		notCall  = kfNotCall
		niladic  = kfStop | kfNotRel
		typeFunc = kfStop | kfNotRel // type-or-function-name keywords
	)
	add := func(id kwID, flags uint8, words ...string) {
		for _, w := range words {
			keywords[w] = keyword{id, flags}
			if len(w) > maxKeywordLen {
				maxKeywordLen = len(w)
			}
		}
	}

	// Postgres reserved words (they can be neither a bare alias nor a function name).
	add(kwReserved, reserved, "asc", "asymmetric", "both", "cast", "check", "collate", "column",
		"constraint", "deferrable", "desc", "else", "false", "initially", "leading", "null",
		"placing", "primary", "references", "some", "symmetric", "trailing", "true",
		"variadic", "any", "array", "in", "and", "default")
	add(kwAll, reserved, "all")
	add(kwAnalyse, reserved, "analyse")
	add(kwAnalyze, reserved, "analyze")
	add(kwAs, reserved, "as")
	add(kwCase, reserved, "case")
	add(kwCreate, reserved, "create")
	add(kwDistinct, reserved, "distinct")
	add(kwDo, reserved, "do")
	add(kwEnd, reserved, "end")
	add(kwExcept, reserved, "except")
	add(kwFetch, reserved, "fetch")
	add(kwFor, reserved, "for")
	add(kwForeign, reserved, "foreign")
	add(kwFrom, reserved, "from")
	add(kwGrant, reserved, "grant")
	add(kwGroup, reserved, "group")
	add(kwHaving, reserved, "having")
	add(kwIntersect, reserved, "intersect")
	add(kwInto, reserved, "into")
	add(kwLateral, reserved, "lateral")
	add(kwLimit, reserved, "limit")
	add(kwNot, reserved, "not")
	add(kwOffset, reserved, "offset")
	add(kwOn, reserved, "on")
	add(kwOnly, reserved, "only")
	add(kwOr, reserved, "or")
	add(kwOrder, reserved, "order")
	add(kwReturning, reserved, "returning")
	add(kwSelect, reserved, "select")
	add(kwTable, reserved, "table")
	add(kwThen, reserved, "then")
	add(kwTo, reserved, "to")
	add(kwUnion, reserved, "union")
	add(kwUnique, reserved, "unique")
	add(kwUsing, reserved, "using")
	add(kwWhen, reserved, "when")
	add(kwWhere, reserved, "where")
	add(kwWindow, reserved, "window")
	add(kwWith, reserved, "with")

	// The SQL niladic functions (reserved words that are function calls without parentheses).
	add(kwCurrentCatalog, niladic, "current_catalog")
	add(kwCurrentDate, niladic, "current_date")
	add(kwCurrentRole, niladic, "current_role")
	add(kwCurrentSchema, niladic, "current_schema")
	add(kwCurrentTime, niladic, "current_time")
	add(kwCurrentTimestamp, niladic, "current_timestamp")
	add(kwCurrentUser, niladic, "current_user")
	add(kwLocaltime, niladic, "localtime")
	add(kwLocaltimestamp, niladic, "localtimestamp")
	add(kwSessionUser, niladic, "session_user")
	add(kwSystemUser, niladic, "system_user")
	add(kwUser, niladic, "user")

	// Type-or-function-name words: they follow an operand or a table reference, and they name
	// a function when followed by '(' (SELECT freeze(1) calls a function "freeze"), except
	// where analyzer.notCall sees syntax (JOIN (…)).
	add(kwJoinWord, typeFunc, "inner", "cross", "natural", "outer", "isnull", "notnull",
		"similar", "authorization", "collation")
	add(kwJoin, typeFunc, "join")
	add(kwFull, typeFunc, "full")
	add(kwIs, typeFunc, "is")
	add(kwTablesample, typeFunc, "tablesample")
	add(kwConcurrently, typeFunc, "concurrently")
	add(kwVerbose, typeFunc, "verbose")
	add(kwFreeze, typeFunc, "freeze")
	add(kwBinary, typeFunc, "binary")
	add(kwOperatorLk, typeFunc, "like", "ilike", "overlaps", "left", "right")

	// Column-name words with special syntax or type modifiers: never plain calls.
	add(kwTypeName, notCall, "interval", "numeric", "decimal", "dec", "char", "character",
		"varchar", "nchar", "national", "bit", "timestamp", "float", "precision",
		"bigint", "int", "integer", "smallint", "real", "boolean", "setof")
	add(kwTime, notCall, "time")
	add(kwConstruct, notCall, "between", "coalesce", "extract", "greatest", "least",
		"nullif", "position", "row", "trim", "treat", "none", "inout", "out")
	add(kwGrouping, notCall, "grouping")
	// SUBSTRING(a, b) and OVERLAY(a, b) with plain argument lists call whatever function of
	// that name the search path finds (a user's substring(int) included): calls.
	add(kwConstruct, 0, "substring", "overlay")
	add(kwExists, notCall, "exists")
	add(kwValues, kfStop|kfNotCall, "values") // a column-name keyword: FROM values is a table

	// OPERATOR(pg_catalog.+) is syntax: Postgres never reads OPERATOR( as a call.
	add(kwNotCall, notCall, "operator")
	// Unreserved words that are syntax before '(' only in context (analyzer.notCall):
	// ORDER BY (…), GROUPING SETS (…), x LIKE y ESCAPE (…), AT TIME ZONE (…), IS OF (…),
	// JSON_TABLE … COLUMNS (…), XMLTABLE … PASSING (…), INTERVAL '1' SECOND(3),
	// CHARACTER VARYING(3), UPDATE t SET (a, b) = ….
	add(kwBy, 0, "by")
	add(kwSets, 0, "sets")
	add(kwEscape, 0, "escape")
	add(kwZone, 0, "zone")
	add(kwColumns, 0, "columns")
	add(kwSecond, 0, "second")
	add(kwPassing, 0, "passing")
	add(kwVarying, 0, "varying")
	add(kwOf, 0, "of")
	add(kwSet, stop, "set") // unreserved, but UPDATE t SET takes precedence over an alias
	add(kwOrdinality, stop, "ordinality")

	// Unreserved words whose '(' is syntax only in context (see analyzer.notCall).
	add(kwOver, 0, "over")
	add(kwFilter, 0, "filter")
	add(kwConflict, 0, "conflict")
	add(kwMaterialized, 0, "materialized")
	add(kwRepeatable, 0, "repeatable")
	add(kwFirst, 0, "first")
	add(kwNext, 0, "next")

	// Plain unreserved words used by the statement parsers.
	for id, w := range map[kwID]string{
		kwAbort: "abort", kwAlter: "alter", kwAtomic: "atomic", kwAttach: "attach",
		kwBegin: "begin", kwCall: "call", kwCascade: "cascade", kwChain: "chain",
		kwCharacteristics: "characteristics", kwCheckpoint: "checkpoint", kwClose: "close",
		kwCluster: "cluster", kwComment: "comment", kwCommit: "commit",
		kwConstraints: "constraints", kwCopy: "copy", kwCursor: "cursor", kwCycle: "cycle",
		kwDeallocate: "deallocate", kwDeclare: "declare", kwDetach: "detach",
		kwDiscard: "discard", kwDrop: "drop", kwExecute: "execute", kwExplain: "explain",
		kwGlobal: "global", kwIf: "if", kwImport: "import", kwIndex: "index",
		kwKey: "key", kwListen: "listen", kwLoad: "load", kwLocal: "local", kwLock: "lock",
		kwMove: "move", kwNo: "no", kwNotify: "notify",
		kwPartition: "partition", kwPrepare: "prepare", kwPrepared: "prepared",
		kwReassign: "reassign", kwRecursive: "recursive", kwRefresh: "refresh",
		kwReindex: "reindex", kwRelease: "release", kwRename: "rename", kwReset: "reset",
		kwRevoke: "revoke", kwRollback: "rollback", kwRows: "rows", kwSavepoint: "savepoint",
		kwSearch: "search", kwSecurity: "security", kwSequence: "sequence", kwSession: "session",
		kwShare: "share", kwShow: "show", kwStart: "start", kwTemp: "temp",
		kwTemporary: "temporary", kwTransaction: "transaction", kwTruncate: "truncate",
		kwUescape: "uescape", kwUnlisten: "unlisten", kwUnlogged: "unlogged",
		kwVacuum: "vacuum", kwView: "view", kwWork: "work",
	} {
		add(id, 0, w)
	}
	// DML words are legal bare aliases, but taking them for one could hide a statement
	// (FROM t delete FROM x): they end a table reference instead.
	add(kwInsert, stop, "insert")
	add(kwUpdate, stop, "update")
	add(kwDelete, stop, "delete")
	add(kwMerge, stop, "merge")
	// OVERRIDING only needs to end a table reference (INSERT INTO t OVERRIDING …).
	add(kwNone, stop, "overriding")
}

// keywordTable is an open-addressing hash table over keywords, probed with a case-folding hash so
// that a lookup neither allocates nor lower-cases the word first.
var keywordTable struct {
	words [kwSlots]string // lower-case word, "" for an empty slot
	kws   [kwSlots]keyword
}

const kwSlots = 1024 // a power of two, well above 2× the number of keywords

func init() {
	for w, k := range keywords {
		h := kwHash(w) & (kwSlots - 1)
		for keywordTable.words[h] != "" {
			h = (h + 1) & (kwSlots - 1)
		}
		keywordTable.words[h], keywordTable.kws[h] = w, k
	}
}

// kwHash hashes a word as if it were lower case.
func kwHash(w string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(w); i++ {
		h = (h ^ uint32(w[i]|0x20)) * 16777619
	}
	return h
}

// lookupKeyword returns the keyword of an unquoted identifier (any case).
func lookupKeyword(w string) keyword {
	if len(w) > maxKeywordLen || len(w) < 2 {
		return keyword{}
	}
	for h := kwHash(w) & (kwSlots - 1); ; h = (h + 1) & (kwSlots - 1) {
		k := keywordTable.words[h]
		if k == "" {
			return keyword{}
		}
		if len(k) == len(w) && equalFoldASCII(k, w) {
			return keywordTable.kws[h]
		}
	}
}

// equalFoldASCII compares lower-case ASCII lower with w ignoring the case of w's ASCII letters.
func equalFoldASCII(lower, w string) bool {
	for i := 0; i < len(w); i++ {
		c := w[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// pgOtherKeywords are the Postgres keywords (pg_get_keywords() of release 15, plus the SQL/JSON
// and other words later releases added) that the table above does not list. The walker only
// asks whether a word is one of them, to tell a name that ends an operand (a column, an alias)
// from a keyword that may introduce one (DEFAULT, VALUE, KEY, …).
var pgOtherKeywords = map[string]bool{}

func init() {
	const words = `normalize xmlattributes xmlconcat xmlelement xmlexists xmlforest xmlnamespaces
	xmlparse xmlpi xmlroot xmlserialize xmltable
	absolute access action add admin after aggregate also always asensitive assertion assignment
	at attribute backward before breadth cache called cascaded catalog class comments committed
	compression configuration connection content continue conversion cost csv cube current data
	database day defaults deferred definer delimiter delimiters depends depth dictionary disable
	document domain double each enable encoding encrypted enum event exclude excluding exclusive
	expression extension external family finalize following force forward function functions
	generated granted groups handler header hold hour identity immediate immutable implicit
	include including increment indexes inherit inherits inline input insensitive instead invoker
	isolation label language large last leakproof level location locked logged mapping match
	matched maxvalue method minute minvalue mode month name names new nfc nfd nfkc nfkd
	normalized nothing nowait nulls object off oids old option options others owned owner
	parallel parameter parser partial password plans policy preceding preserve prior privileges
	procedural procedure procedures program publication quote range read recheck ref
	referencing relative replace replica restart restrict return returns role rollup routine
	routines rule schema schemas scroll sequences serializable server simple skip snapshot sql
	stable standalone statement statistics stdin stdout storage stored strict strip
	subscription support sysid system tables tablespace template text ties transform trigger
	trusted type types unbounded uncommitted unencrypted unknown until valid validate validator
	value version views volatile whitespace within without wrapper write xml year yes
	absent format json json_array json_arrayagg json_object json_objectagg keys scalar
	conditional empty error json_exists json_query json_scalar json_serialize json_table
	json_value keep merge_action nested omit path plan quotes string unconditional
	enforced objects period virtual`
	for _, w := range strings.Fields(words) {
		pgOtherKeywords[w] = true
	}
}

// isPGKeyword reports whether an unquoted word is a Postgres keyword of any category.
func isPGKeyword(w string) bool {
	if k := lookupKeyword(w); k.id != kwNone || k.flags != 0 {
		return true
	}
	return pgOtherKeywords[lowerASCII(w)]
}

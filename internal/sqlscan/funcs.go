package sqlscan

import "strings"

// fnClass is what calling a function means for sharing.
type fnClass uint8

const (
	fnUnknown fnClass = iota // the scanner cannot vouch for it: OptIn, tables unknown
	fnSafe                   // immutable or stable built-in: shareable
	fnTime                   // depends on the clock: InFlightOnly
	fnNever                  // side effect or per-call/per-session value: Never
)

// fnInfo describes one function.
type fnInfo struct {
	class  fnClass
	why    string // for fnNever: "side effect", "volatile", "per-session value"
	taints bool   // the effect outlives the statement (session-level lock, setting, connection)
	opaque bool   // may read or write relations the scanner cannot see
	seq    bool   // first argument names a sequence that the call modifies
}

// Function table. Every name is lower case (quoted names are matched exactly, so
// "NEXTVAL"() is not nextval()). Prefix rules (prefixFuncs below) only ever make a name
// Never. TestFunctionTableAgainstServer checks the safe and time entries against pg_proc: none
// may have a VOLATILE overload.
var funcs = map[string]fnInfo{}

func init() {
	never := func(why string, names ...string) {
		for _, n := range names {
			funcs[n] = fnInfo{class: fnNever, why: why}
		}
	}
	set := func(name string, f func(*fnInfo)) {
		fi := funcs[name]
		f(&fi)
		funcs[name] = fi
	}

	// ---- Never: side effects, or a value that differs per call or per session. ----
	never("side effect", "nextval", "setval", "setseed", "set_config", "pg_notify",
		"txid_current", "pg_current_xact_id", "pg_sleep", "pg_sleep_for", "pg_sleep_until",
		"pg_cancel_backend", "pg_terminate_backend", "pg_reload_conf", "pg_rotate_logfile",
		"pg_switch_wal", "pg_create_restore_point", "pg_stat_clear_snapshot",
		"lowrite", "loread", "pg_logical_emit_message", "pg_drop_replication_slot",
		"pg_export_snapshot", "pg_promote", "pg_wal_replay_pause", "pg_wal_replay_resume",
		// advisory locks (session- and transaction-level)
		"pg_advisory_lock", "pg_advisory_lock_shared", "pg_try_advisory_lock",
		"pg_try_advisory_lock_shared", "pg_advisory_unlock", "pg_advisory_unlock_shared",
		"pg_advisory_unlock_all", "pg_advisory_xact_lock", "pg_advisory_xact_lock_shared",
		"pg_try_advisory_xact_lock", "pg_try_advisory_xact_lock_shared")
	never("volatile", "random", "random_normal", "gen_random_uuid", "uuidv4", "uuidv7",
		"uuid_generate_v1", "uuid_generate_v1mc", "uuid_generate_v4",
		"gen_random_bytes", "gen_salt", "pgp_sym_encrypt", "pgp_sym_encrypt_bytea",
		"pgp_pub_encrypt", "pgp_pub_encrypt_bytea",
		"pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file",
		"pg_current_snapshot", "txid_current_snapshot",
		// sizes read from the file system: VOLATILE in pg_proc
		"pg_relation_size", "pg_total_relation_size", "pg_table_size", "pg_indexes_size",
		"pg_database_size", "pg_tablespace_size",
		// the clock read at each call (now() and friends are fixed per transaction)
		"clock_timestamp", "timeofday",
		// the server's state, read at each call (VOLATILE in pg_proc; some behind catalog
		// views: pg_locks, pg_prepared_xacts, pg_sequences, pg_file_settings …)
		"pg_is_in_recovery", "pg_current_wal_lsn", "pg_current_wal_insert_lsn",
		"pg_current_wal_flush_lsn", "pg_last_wal_receive_lsn", "pg_last_wal_replay_lsn",
		"pg_last_xact_replay_timestamp", "pg_is_wal_replay_paused",
		"pg_get_wal_replay_pause_state", "pg_blocking_pids", "pg_safe_snapshot_blocking_pids",
		"pg_lock_status", "pg_prepared_xact", "pg_sequence_last_value", "pg_xact_status",
		"txid_status", "pg_xact_commit_timestamp", "pg_xact_commit_timestamp_origin",
		"pg_last_committed_xact", "pg_current_logfile", "pg_show_all_file_settings",
		"pg_hba_file_rules", "pg_ident_file_mappings", "pg_get_shmem_allocations",
		"pg_control_checkpoint", "pg_control_init", "pg_control_recovery", "pg_control_system",
		"pg_jit_available", "pg_partition_tree", "pg_partition_ancestors",
		"pg_collation_actual_version", "pg_database_collation_actual_version",
		"pg_get_multixact_members", "pg_stat_have_stats", "pg_stat_get_recovery_prefetch")
	never("per-session value", "currval", "lastval", "pg_backend_pid",
		"txid_current_if_assigned", "pg_current_xact_id_if_assigned", "pg_my_temp_schema",
		"inet_client_addr", "inet_client_port", "inet_server_addr", "inet_server_port",
		"pg_trigger_depth", "current_query", "pg_get_backend_memory_contexts",
		"pg_notification_queue_usage")
	for _, n := range []string{"pg_advisory_lock", "pg_advisory_lock_shared",
		"pg_try_advisory_lock", "pg_try_advisory_lock_shared", "set_config", "setseed"} {
		set(n, func(f *fnInfo) { f.taints = true })
	}
	set("nextval", func(f *fnInfo) { f.seq = true })
	set("setval", func(f *fnInfo) { f.seq = true })

	// ---- Time-dependent (STABLE, fixed within a transaction or statement): InFlightOnly. ----
	for _, n := range []string{"now", "current_timestamp", "current_date", "current_time",
		"localtime", "localtimestamp", "statement_timestamp", "transaction_timestamp",
		"age", // age(ts) is relative to the current date (any arity, to be safe)
		"pg_postmaster_start_time", "pg_conf_load_time"} {
		funcs[n] = fnInfo{class: fnTime}
	}

	// ---- Known safe: immutable or stable built-ins. ----
	for _, group := range [][]string{
		// aggregates
		{"count", "sum", "avg", "min", "max", "array_agg", "string_agg", "json_agg",
			"jsonb_agg", "json_agg_strict", "jsonb_agg_strict", "json_object_agg",
			"jsonb_object_agg", "json_objectagg", "json_arrayagg", "bool_and", "bool_or",
			"every", "bit_and", "bit_or", "bit_xor", "any_value", "percentile_cont",
			"percentile_disc", "mode", "corr", "xmlagg", "range_agg", "range_intersect_agg",
			"stddev", "stddev_pop", "stddev_samp", "variance", "var_pop", "var_samp",
			"covar_pop", "covar_samp", "regr_avgx", "regr_avgy", "regr_count",
			"regr_intercept", "regr_r2", "regr_slope", "regr_sxx", "regr_sxy", "regr_syy"},
		// window functions
		{"row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag",
			"lead", "first_value", "last_value", "nth_value"},
		// math
		{"abs", "ceil", "ceiling", "floor", "round", "trunc", "sign", "sqrt", "cbrt", "power",
			"pow", "exp", "ln", "log", "log10", "mod", "div", "pi", "degrees", "radians", "sin",
			"cos", "tan", "cot", "asin", "acos", "atan", "atan2", "sind", "cosd", "tand",
			"asind", "acosd", "atand", "atan2d", "sinh", "cosh", "tanh", "asinh", "acosh",
			"atanh", "greatest", "least", "width_bucket", "gcd", "lcm", "factorial", "scale",
			"trim_scale", "min_scale", "erf", "erfc"},
		// strings
		{"length", "char_length", "character_length", "octet_length", "bit_length", "lower",
			"upper", "initcap", "concat", "concat_ws", "substr", "substring", "left", "right",
			"lpad", "rpad", "ltrim", "rtrim", "btrim", "trim", "replace", "translate",
			"repeat", "reverse", "split_part", "strpos", "position", "starts_with", "format",
			"quote_ident", "quote_literal", "quote_nullable", "md5", "sha224", "sha256",
			"sha384", "sha512", "crc32", "crc32c", "encode", "decode", "to_hex", "to_bin",
			"to_oct", "ascii", "chr", "regexp_replace", "regexp_match", "regexp_matches",
			"regexp_split_to_array", "regexp_split_to_table", "regexp_count", "regexp_instr",
			"regexp_like", "regexp_substr", "string_to_array", "string_to_table",
			"array_to_string", "overlay", "convert_from", "convert_to", "normalize", "unistr",
			"to_ascii", "like", "ilike", "notlike", "notilike", "casefold"},
		// formatting, dates
		{"to_char", "to_number", "to_date", "to_timestamp", "date_trunc", "date_part",
			"extract", "date_bin", "make_date", "make_time", "make_timestamp",
			"make_timestamptz", "make_interval", "justify_days", "justify_hours",
			"justify_interval", "isfinite", "overlaps", "date_add", "date_subtract"},
		// json
		{"json_build_object", "jsonb_build_object", "json_build_array", "jsonb_build_array",
			"to_json", "to_jsonb", "row_to_json", "array_to_json", "json_extract_path",
			"json_extract_path_text", "jsonb_extract_path", "jsonb_extract_path_text",
			"jsonb_set", "jsonb_set_lax", "jsonb_insert", "jsonb_strip_nulls",
			"json_strip_nulls", "jsonb_pretty", "json_array_length", "jsonb_array_length",
			"json_each", "jsonb_each", "json_each_text", "jsonb_each_text",
			"json_array_elements", "jsonb_array_elements", "json_array_elements_text",
			"jsonb_array_elements_text", "json_object_keys", "jsonb_object_keys",
			"json_typeof", "jsonb_typeof", "jsonb_path_query", "jsonb_path_query_array",
			"jsonb_path_query_first", "jsonb_path_exists", "jsonb_path_match",
			"json_populate_record", "jsonb_populate_record", "json_populate_recordset",
			"jsonb_populate_recordset", "json_to_record", "jsonb_to_record",
			"json_to_recordset", "jsonb_to_recordset", "jsonb_object", "json_object",
			"json_array", "json", "json_scalar", "json_serialize", "json_query", "json_value",
			"json_exists", "json_table", "jsonb_exists", "jsonb_exists_any",
			"jsonb_exists_all", "jsonb_contains", "jsonb_concat", "jsonb_delete"},
		// xml constructors
		{"xmlelement", "xmlforest", "xmlconcat", "xmlparse", "xmlserialize", "xmlpi",
			"xmlroot", "xmlexists", "xmltable", "xmlattributes", "xmlnamespaces",
			"xmlcomment", "xmltext", "xpath", "xpath_exists", "merge_action"},
		// arrays
		{"array_length", "array_lower", "array_upper", "array_dims", "array_ndims",
			"cardinality", "array_append", "array_prepend", "array_cat", "array_position",
			"array_positions", "array_remove", "array_replace", "array_fill", "trim_array",
			"array_reverse", "array_sort", "generate_series", "generate_subscripts", "unnest"},
		// misc, casts, catalog
		{"coalesce", "nullif", "num_nonnulls", "num_nulls", "pg_typeof", "format_type",
			"current_setting", "current_database", "current_schema", "current_schemas",
			"current_user", "session_user", "current_role", "user", "current_catalog",
			"system_user", "version", "has_table_privilege", "has_schema_privilege",
			"has_column_privilege", "has_database_privilege", "has_function_privilege",
			"has_sequence_privilege", "pg_has_role", "row", "exists", "bool", "int2", "int4",
			"int8", "float4", "float8", "numeric", "text", "date", "uuid", "inet", "cidr",
			"host", "hostmask", "family", "netmask", "network", "broadcast", "abbrev",
			"masklen", "set_masklen", "inet_same_family", "inet_merge", "cube", "rollup",
			"pg_get_serial_sequence", "pg_column_size", "uuid_extract_timestamp",
			"uuid_extract_version", "isempty"},
		// text search
		{"to_tsvector", "to_tsquery", "plainto_tsquery", "phraseto_tsquery",
			"websearch_to_tsquery", "ts_rank", "ts_rank_cd", "ts_headline", "setweight",
			"strip", "tsvector_to_array", "array_to_tsvector", "numnode", "querytree",
			"similarity", "word_similarity", "strict_word_similarity", "show_trgm"},
		// sizes, catalog introspection
		{"pg_size_pretty", "pg_size_bytes", "obj_description",
			"col_description", "shobj_description", "pg_get_viewdef", "pg_get_indexdef",
			"pg_get_constraintdef", "pg_get_expr", "pg_get_userbyid", "pg_get_functiondef",
			"pg_get_function_arguments", "pg_get_function_result",
			"pg_get_function_identity_arguments", "pg_get_triggerdef", "pg_encoding_to_char",
			"pg_char_to_encoding", "to_regclass", "to_regtype", "to_regproc",
			"to_regprocedure", "to_regnamespace", "to_regrole", "to_regtypemod"},
		// ranges
		{"lower_inc", "upper_inc", "lower_inf", "upper_inf", "range_merge", "int4range",
			"int8range", "numrange", "tsrange", "tstzrange", "daterange", "int4multirange",
			"int8multirange", "nummultirange", "tsmultirange", "tstzmultirange",
			"datemultirange", "multirange"},
		// hstore, pgcrypto (deterministic ones only)
		{"hstore", "akeys", "avals", "skeys", "svals", "each", "exist", "defined",
			"hstore_to_json", "hstore_to_jsonb", "slice", "digest", "hmac"},
	} {
		for _, n := range group {
			if _, dup := funcs[n]; !dup { // never and time entries win
				funcs[n] = fnInfo{class: fnSafe}
			}
		}
	}
}

// prefixFuncs are the prefix rules, checked in order after an exact lookup fails.
var prefixFuncs = []struct {
	prefix, suffix string
	info           fnInfo
}{
	{"pg_stat_reset", "", fnInfo{class: fnNever, why: "side effect"}},
	{"pg_stat_get_xact_", "", fnInfo{class: fnNever, why: "per-session value"}},
	{"lo_", "", fnInfo{class: fnNever, why: "side effect", opaque: true}},
	{"dblink", "", fnInfo{class: fnNever, why: "side effect", opaque: true}},
	{"pg_replication_", "", fnInfo{class: fnNever, why: "side effect"}},
	{"pg_logical_slot_", "", fnInfo{class: fnNever, why: "side effect"}},
	{"pg_create_", "_replication_slot", fnInfo{class: fnNever, why: "side effect"}},
	{"pg_ls_", "", fnInfo{class: fnNever, why: "volatile"}},
	{"pg_backup_", "", fnInfo{class: fnNever, why: "side effect"}},
	// No prefix rule may make a name safe: a user function named like a family of built-ins
	// (regr_mine, st_generatepoints …) would pass unseen. Such names are unknown (OptIn).
}

// sessionDblink are the dblink functions whose effect (a named connection or cursor) outlives
// the statement.
var sessionDblink = map[string]bool{
	"dblink_connect": true, "dblink_connect_u": true, "dblink_open": true,
	"dblink_send_query": true,
}

// lookupFunc classifies a function by its (unqualified, folded) name.
func lookupFunc(name string) fnInfo {
	if fi, ok := funcs[name]; ok {
		return fi
	}
	for _, p := range prefixFuncs {
		if strings.HasPrefix(name, p.prefix) && strings.HasSuffix(name[len(p.prefix):], p.suffix) {
			fi := p.info
			if p.prefix == "dblink" && sessionDblink[name] {
				fi.taints = true
			}
			return fi
		}
	}
	return fnInfo{class: fnUnknown}
}

// SessionNeutral reports whether name (unqualified, folded) is a built-in the scanner knows
// whose call leaves the session as it found it, as far as shared results can tell: an
// immutable or stable function, or a volatile one whose effect is a table write, a value of
// its own call, or a per-session value that is never shared (nextval, random, pg_backend_pid
// …). Functions it does not know, those that change settings, locks or connections beyond the
// statement (set_config, setseed, pg_advisory_lock, dblink_connect …), and those that run
// code or open descriptors it cannot see (lo_*, dblink*) are not neutral.
func SessionNeutral(name string) bool {
	fi := lookupFunc(name)
	return fi.class != fnUnknown && !fi.taints && !fi.opaque
}

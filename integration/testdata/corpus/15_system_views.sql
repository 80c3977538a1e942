-- System views over VOLATILE or per-session functions.

-- @calls pg_lock_status
SELECT * FROM pg_locks

-- @calls pg_lock_status
SELECT locktype, mode, granted FROM pg_locks WHERE NOT granted

-- @calls pg_lock_status
SELECT count(*) FROM pg_catalog.pg_locks l JOIN pg_class c ON c.oid = l.relation

-- @calls pg_prepared_xact
SELECT * FROM pg_prepared_xacts

-- @calls pg_prepared_xact
SELECT gid FROM pg_catalog.pg_prepared_xacts WHERE database = current_database()

-- @calls pg_sequence_last_value
SELECT * FROM pg_sequences

-- @calls pg_sequence_last_value
SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = current_schema()

-- @calls pg_prepared_statement
-- @session
SELECT * FROM pg_prepared_statements

-- @calls pg_prepared_statement
-- @session
SELECT name, statement FROM pg_catalog.pg_prepared_statements WHERE NOT from_sql

-- @calls pg_cursor
-- @session
SELECT * FROM pg_cursors

-- @calls pg_cursor
-- @session
SELECT count(*) FROM pg_cursors WHERE is_holdable

-- @calls pg_get_shmem_allocations
SELECT name, size FROM pg_shmem_allocations ORDER BY size DESC LIMIT 3

-- @calls pg_get_backend_memory_contexts
-- @session
SELECT name, total_bytes FROM pg_backend_memory_contexts LIMIT 3

-- @calls pg_show_all_file_settings
SELECT * FROM pg_file_settings

-- @calls pg_lock_status, pg_blocking_pids
SELECT pid, pg_blocking_pids(pid) FROM pg_locks WHERE pid IS NOT NULL

-- @expect any
SELECT pid, state, query FROM pg_stat_activity WHERE datname = current_database()

-- @expect any
SELECT name, setting FROM pg_settings WHERE name = 'work_mem'

-- @expect any
SELECT relname, n_live_tup, seq_scan FROM pg_stat_user_tables

-- Catalog reads: plain reads of the system catalogs and information_schema
-- (ORM schema introspection, migrations tools, admin UIs).

-- @class catalog
SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()

-- @class catalog
-- @args 'users'
SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position

-- @class catalog
SELECT tc.constraint_name, kcu.column_name FROM information_schema.table_constraints tc
JOIN information_schema.key_column_usage kcu ON tc.constraint_name = kcu.constraint_name AND tc.table_schema = kcu.table_schema
WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = current_schema()

-- @class catalog
SELECT count(*) FROM information_schema.schemata

-- @class catalog
SELECT routine_name FROM information_schema.routines WHERE routine_schema = current_schema()

-- @class catalog
SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema()

-- @class catalog
SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relname = 'users' AND pg_catalog.pg_table_is_visible(c.oid)

-- @class catalog
SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_attribute a WHERE a.attrelid = 'users'::regclass AND a.attnum > 0 AND NOT a.attisdropped

-- @class catalog
SELECT indexrelid::regclass, pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'users'::regclass

-- @class catalog
SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'orders'::regclass

-- @class catalog
SELECT pg_get_viewdef('v_active_users'::regclass, true)

-- @class catalog
SELECT proname, provolatile FROM pg_proc WHERE pronamespace = current_schema()::regnamespace

-- @class catalog
SELECT typname FROM pg_type WHERE typnamespace = 'pg_catalog'::regnamespace AND typtype = 'b' LIMIT 10

-- @class catalog
SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg_%'

-- @class catalog
SELECT extname, extversion FROM pg_extension

-- @class catalog
SELECT rolname FROM pg_roles WHERE rolcanlogin

-- @class catalog
SELECT datname FROM pg_database WHERE NOT datistemplate

-- @class catalog
SELECT obj_description('users'::regclass, 'pg_class'), col_description('users'::regclass, 1)

-- @class catalog
SELECT t.tgname FROM pg_trigger t WHERE t.tgrelid = 'documents'::regclass AND NOT t.tgisinternal

-- @class catalog
SELECT schemaname, viewname FROM pg_views WHERE schemaname = current_schema()

-- @class catalog
SELECT tablename, indexname FROM pg_indexes WHERE schemaname = current_schema()

-- @class catalog
SELECT schemaname, tablename FROM pg_tables WHERE schemaname = current_schema()

-- @class catalog
SELECT version()

-- @class catalog
SELECT current_database(), current_schema(), current_user, session_user

-- @class catalog
SELECT has_table_privilege('users', 'SELECT'), pg_has_role(current_user, 'USAGE')

-- @class catalog
SELECT pg_get_serial_sequence('users', 'id')

-- @class catalog
SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid WHERE t.typname = 'no_such_enum'

-- @class catalog
SELECT pg_catalog.pg_encoding_to_char(encoding) FROM pg_database WHERE datname = current_database()

-- @class catalog
-- @expect any
SHOW search_path

-- @class catalog
-- @expect any
SHOW server_version

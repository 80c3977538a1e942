-- Per-session values: never shared across sessions.

-- @calls inet_client_addr
-- @session
SELECT inet_client_addr()

-- @calls inet_client_port
-- @session
SELECT inet_client_port()

-- @calls inet_client_addr, inet_client_port
-- @session
SELECT inet_client_addr(), inet_client_port(), id FROM users

-- @calls pg_backend_pid
-- @session
SELECT pg_backend_pid()

-- @calls pg_backend_pid
-- @session
SELECT id FROM users WHERE pg_backend_pid() > 0

-- @calls pg_my_temp_schema
-- @session
SELECT pg_my_temp_schema()

-- @calls pg_my_temp_schema
-- @session
SELECT nspname FROM pg_namespace WHERE oid = pg_my_temp_schema()

-- @calls txid_current_if_assigned
-- @session
SELECT txid_current_if_assigned()

-- @calls pg_current_xact_id_if_assigned
-- @session
SELECT pg_current_xact_id_if_assigned()

-- @calls pg_current_xact_id
-- @session
SELECT pg_current_xact_id()

-- @calls pg_backend_pid
-- @session
SELECT /* sqlflight: ttl=1m */ pg_backend_pid()

-- @calls pg_backend_pid
-- @session
SELECT /* sqlflight: coalesce */ pg_backend_pid(), id FROM users

-- @calls pg_listening_channels
-- @session
SELECT * FROM pg_listening_channels()

-- @calls pg_backend_pid
-- @session
SELECT a.pid FROM (SELECT pg_backend_pid() AS pid) a

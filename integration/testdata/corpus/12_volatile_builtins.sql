-- Built-in VOLATILE functions: sizes, randomness, clocks, sequences,
-- transaction ids. Never shared.

-- @calls pg_relation_size
SELECT pg_relation_size('users')

-- @calls pg_total_relation_size
SELECT pg_total_relation_size('users')

-- @calls pg_table_size
SELECT pg_table_size('orders')

-- @calls pg_indexes_size
SELECT pg_indexes_size('users')

-- @calls pg_database_size
SELECT pg_database_size(current_database())

-- @calls pg_database_size, pg_size_pretty
SELECT pg_size_pretty(pg_database_size(current_database()))

-- @calls pg_relation_size, pg_size_pretty
SELECT relname, pg_size_pretty(pg_relation_size(c.oid)) FROM pg_class c WHERE relkind = 'r' AND relnamespace = current_schema()::regnamespace

-- @calls pg_total_relation_size
SELECT c.relname FROM pg_class c ORDER BY pg_total_relation_size(c.oid) DESC LIMIT 5

-- @calls random
SELECT random()

-- @calls random
SELECT * FROM users ORDER BY random() LIMIT 1

-- @calls random
SELECT id FROM users WHERE random() < 2

-- @calls random, floor
SELECT floor(random() * 100)::int

-- @calls setseed
SELECT setseed(0.5)

-- @calls clock_timestamp
-- @time
SELECT clock_timestamp()

-- @calls timeofday
-- @time
SELECT timeofday()

-- @calls clock_timestamp
-- @time
SELECT id FROM orders WHERE created_at < clock_timestamp()

-- @calls nextval
SELECT nextval('order_seq')

-- @calls nextval
SELECT nextval('order_seq'::regclass), id FROM users

-- @calls nextval, currval
SELECT nextval('order_seq'), currval('order_seq')

-- @calls nextval, lastval
SELECT nextval('order_seq') + lastval()

-- @calls setval
SELECT setval('order_seq', 100)

-- @class per_session
-- pg_proc says STABLE, but the value is this transaction's own id.
-- @calls txid_current
-- @session
SELECT txid_current()

-- @calls gen_random_uuid
SELECT gen_random_uuid()

-- @calls gen_random_uuid
SELECT gen_random_uuid(), id FROM users

-- @calls gen_random_uuid
SELECT id FROM sessions WHERE id <> gen_random_uuid()

-- @calls pg_sleep
SELECT pg_sleep(0)

-- @calls set_config
SELECT set_config('application_name', 'x', true)

-- @calls pg_try_advisory_lock
SELECT pg_try_advisory_lock(42)

-- @calls pg_advisory_xact_lock
SELECT pg_advisory_xact_lock(43)

-- @calls pg_notify
SELECT pg_notify('chan', 'payload')

-- @calls pg_current_wal_lsn
SELECT pg_current_wal_lsn()

-- @calls pg_is_in_recovery
SELECT pg_is_in_recovery()

-- @calls pg_tablespace_size
SELECT pg_tablespace_size('pg_default')

-- @calls random
SELECT id, random() > 0.5 AS coin FROM users

-- @calls random
SELECT ARRAY(SELECT random() FROM generate_series(1, 3))

-- @calls random
SELECT (SELECT random()) AS r

-- @calls txid_status, txid_current
SELECT txid_status(txid_current())

-- @calls random
SELECT id FROM users TABLESAMPLE SYSTEM (random() * 100)

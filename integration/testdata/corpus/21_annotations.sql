-- Policy annotations cannot make a volatile statement shareable; only
-- pure= naming every volatile function it calls can.

-- @class annotations
-- @calls log_access
SELECT /* sqlflight: ttl=1m */ log_access('ann')

-- @class annotations
-- @calls log_access
SELECT /* sqlflight: coalesce */ log_access('ann')

-- @class annotations
-- @calls random
SELECT /* sqlflight: coalesce ttl=1m */ random()

-- @class annotations
-- @calls pg_relation_size
/* sqlflight: soft=30s hard=5m */ SELECT pg_relation_size('users')

-- @class annotations
-- @calls touch
-- sqlflight: coalesce
SELECT u.touch FROM users u

-- @class annotations
-- @calls random
SELECT /* sqlflight: coalesce tables=users */ * FROM v_random_user

-- @class annotations
-- @calls plus_one
SELECT /* sqlflight: coalesce pure=plus_one */ plus_one(1)

-- @class annotations
-- @calls plus_one
SELECT /* sqlflight: coalesce pure=PLUS_ONE */ id, plus_one(age) FROM users

-- @class annotations
-- @calls random
SELECT /* sqlflight: coalesce pure=random */ * FROM v_random_user

-- @class annotations
-- @calls jitter_add, random
SELECT /* sqlflight: coalesce pure=jitter_add,random */ 1 +~ 2

-- @class annotations
-- pure= vouches for the function named and what its body calls.
-- @calls jitter_add
SELECT /* sqlflight: coalesce pure=jitter_add */ 1 +~ 2

-- @class annotations
-- @calls lucky
SELECT /* sqlflight: coalesce pure=lucky */ u.lucky FROM users u

-- @class annotations
-- @calls read_only_plpgsql
SELECT /* sqlflight: coalesce pure=read_only_plpgsql */ read_only_plpgsql()

-- @class annotations
-- @calls pg_relation_size
-- @expect never
-- The scanner's never list is binding: pure= vouches for user functions the
-- server calls VOLATILE, not for built-ins the scanner already refuses.
SELECT /* sqlflight: coalesce pure=pg_catalog.pg_relation_size */ pg_relation_size('users')

-- @class annotations
SELECT /* sqlflight: ttl=1m name=orders_by_status */ status, count(*) FROM orders GROUP BY status

-- @class annotations
SELECT /* sqlflight: nocache */ id FROM users

-- @class annotations
-- @expect never
SELECT /* sqlflight: off */ id FROM users

-- @class annotations
-- nocoalesce: every caller queries, but the result may be cached.
SELECT /* sqlflight: nocoalesce */ id FROM users

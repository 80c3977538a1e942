-- VOLATILE user functions: plpgsql that writes, SQL functions with the
-- default volatility, functions hidden in expressions. Never shared.

-- @calls log_access
SELECT log_access('users')

-- @calls log_access
SELECT id, email FROM users WHERE log_access('users') = 1

-- @calls log_access
SELECT u.id, log_access('orders') FROM users u JOIN orders o ON o.user_id = u.id

-- @calls bump
SELECT bump('hits')

-- @calls bump
-- @args 'hits'
SELECT bump($1) AS n

-- @calls bump
SELECT * FROM counters WHERE n < bump('hits')

-- @calls next_order_no, nextval
SELECT next_order_no()

-- @calls plus_one
SELECT plus_one(1)

-- @calls plus_one
SELECT plus_one(age) FROM users

-- @calls plus_one
SELECT id FROM users ORDER BY plus_one(age)

-- @calls plus_one
SELECT count(*) FROM users GROUP BY plus_one(org_id)

-- @calls pick_user
SELECT * FROM pick_user()

-- @calls pick_user
SELECT p.email FROM pick_user() AS p

-- @calls pick_user
SELECT u.id FROM users u JOIN pick_user() p ON p.id = u.id

-- @calls read_only_plpgsql
SELECT read_only_plpgsql()

-- @calls read_only_plpgsql
SELECT id FROM users WHERE id < read_only_plpgsql()

-- @calls log_access
WITH x AS (SELECT log_access('cte') AS v) SELECT * FROM x

-- @calls log_access
SELECT * FROM (SELECT log_access('sub')) s

-- @calls log_access
SELECT CASE WHEN id > 0 THEN log_access('case') ELSE 0 END FROM users

-- @calls log_access
SELECT coalesce(NULL, log_access('coalesce'))

-- @calls log_access
SELECT id FROM users WHERE EXISTS (SELECT 1 WHERE log_access('exists') = 1)

-- @calls log_access
SELECT array_agg(log_access('agg')) FROM users

-- @calls log_access
SELECT * FROM users LIMIT log_access('limit')

-- @calls log_access
SELECT "log_access"('quoted')

-- @calls log_access
SELECT LOG_ACCESS('upper')

-- @calls log_access
SELECT /* comment */ log_access /* between */ ('comment')

-- @calls plus_one
SELECT id FROM users WHERE plus_one(id::int) IN (SELECT plus_one(user_id::int) FROM orders WHERE true)

-- @calls next_order_no, nextval
SELECT id, next_order_no() FROM users

-- @calls bump
-- @args 'hits'
SELECT id FROM users WHERE $1::text IS NOT NULL AND bump($1) > 0

-- @calls user_orders, log_access
SELECT * FROM user_orders(1) WHERE log_access('fn') = 1

-- User-defined IMMUTABLE/STABLE functions: shared in flight, cached only
-- under the statement's own TTL.

-- @calls double_it
SELECT double_it(21)

-- @calls double_it
SELECT id, double_it(age) FROM users

-- @calls double_it
SELECT id FROM users WHERE double_it(age) > 50

-- @calls user_email
SELECT user_email(1)

-- @calls user_email
-- @args 2
SELECT user_email($1)

-- @calls user_email
SELECT o.id, user_email(o.user_id) FROM orders o

-- @calls org_size
SELECT org_size(1)

-- @calls org_size
SELECT name, org_size(id) FROM orgs

-- @calls slugify
SELECT slugify(name) FROM products

-- @calls slugify
SELECT slugify('Hello World')

-- @calls active_users
SELECT * FROM active_users()

-- @calls active_users
SELECT count(*) FROM active_users() a WHERE a.org_id = 1

-- @calls user_orders
SELECT * FROM user_orders(1)

-- @calls user_orders
SELECT u.id, uo.total FROM users u CROSS JOIN LATERAL user_orders(u.id) uo

-- @calls fullname
SELECT fullname(users) FROM users

-- @calls double_it
SELECT /* sqlflight: ttl=1m */ double_it(2)

-- @calls org_size
SELECT /* sqlflight: soft=10s hard=1m */ org_size(2)

-- @calls user_email
-- sqlflight: ttl=30s name=user_email
SELECT user_email(2)

-- @calls double_it, user_email
SELECT double_it(id::int), user_email(id) FROM users

-- @calls imm_close
SELECT count(*) FROM products WHERE imm_close(price, 5)

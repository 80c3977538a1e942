-- bun and ent style: quoted table aliases, CTEs, LATERAL, DISTINCT ON,
-- window functions, GROUPING SETS, batched upserts.

-- @class orm
SELECT "u"."id", "u"."email", "u"."name" FROM "users" AS "u" WHERE ("u"."deleted_at" IS NULL)

-- @class orm
-- @args 1
SELECT "u"."id", "u"."email" FROM "users" AS "u" WHERE ("u"."id" = $1) LIMIT 1

-- @class orm
SELECT count(*) FROM "orders" AS "o" WHERE ("o"."status" = 'paid')

-- @class orm
-- @args 'e1@x.io', 'e1', 'e2@x.io', 'e2'
INSERT INTO "users" AS "u" ("email", "name") VALUES ($1, $2), ($3, $4) RETURNING "u"."id"

-- @class orm
-- @args 1
UPDATE "orders" AS "o" SET "status" = 'shipped' WHERE ("o"."id" = $1)

-- @class orm
-- @args 1
DELETE FROM "order_items" AS "i" WHERE ("i"."order_id" = $1)

-- @class orm
SELECT DISTINCT ON ("o"."user_id") "o"."user_id", "o"."id", "o"."created_at" FROM "orders" AS "o" ORDER BY "o"."user_id", "o"."created_at" DESC

-- @class orm
WITH "recent" AS (SELECT * FROM "orders" WHERE "status" <> 'cancelled')
SELECT "recent"."user_id", count(*) FROM "recent" GROUP BY "recent"."user_id"

-- @class orm
SELECT u.id, last.id AS last_order FROM users u
LEFT JOIN LATERAL (SELECT o.id FROM orders o WHERE o.user_id = u.id ORDER BY o.created_at DESC LIMIT 1) last ON true

-- @class orm
SELECT u.id, t.tag FROM users u CROSS JOIN LATERAL unnest(u.tags) AS t(tag)

-- @class orm
SELECT user_id, total, row_number() OVER (PARTITION BY user_id ORDER BY total DESC) AS rn FROM orders

-- @class orm
SELECT user_id, total, sum(total) OVER w AS running, lag(total) OVER w AS prev
FROM orders WINDOW w AS (PARTITION BY user_id ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)

-- @class orm
SELECT * FROM (SELECT o.*, rank() OVER (ORDER BY total DESC) AS r FROM orders o) ranked WHERE r <= 3

-- @class orm
SELECT status, user_id, sum(total) FROM orders GROUP BY GROUPING SETS ((status), (user_id), ())

-- @class orm
SELECT status, user_id, sum(total) FROM orders GROUP BY ROLLUP (status, user_id)

-- @class orm
SELECT status, user_id, count(*) FROM orders GROUP BY CUBE (status, user_id)

-- @class orm
SELECT status, grouping(status) AS g, count(*) FROM orders GROUP BY ROLLUP (status)

-- @class orm
WITH RECURSIVE sub AS (
  SELECT id, parent_id, label, 1 AS depth FROM tree WHERE parent_id IS NULL
  UNION ALL
  SELECT t.id, t.parent_id, t.label, s.depth + 1 FROM tree t JOIN sub s ON t.parent_id = s.id
)
SELECT * FROM sub ORDER BY depth

-- @class orm
WITH RECURSIVE up(id, parent_id) AS (
  SELECT id, parent_id FROM orgs WHERE id = 2
  UNION
  SELECT o.id, o.parent_id FROM orgs o JOIN up ON o.id = up.parent_id
) SEARCH DEPTH FIRST BY id SET ordercol
SELECT * FROM up ORDER BY ordercol

-- @class orm
WITH t AS MATERIALIZED (SELECT id FROM users) SELECT count(*) FROM t

-- @class orm
WITH t AS NOT MATERIALIZED (SELECT id FROM users) SELECT * FROM t WHERE id > 0

-- @class orm
-- ent: the edge query
SELECT DISTINCT "users"."id", "users"."email" FROM "users" JOIN (SELECT "orders"."user_id" FROM "orders" WHERE "orders"."total" > 5) AS "t1" ON "users"."id" = "t1"."user_id"

-- @class orm
-- @args 1
SELECT "orders"."id", "orders"."total" FROM "orders" WHERE "orders"."user_id" IN (SELECT "users"."id" FROM "users" WHERE "users"."org_id" = $1)

-- @class orm
-- @args 1
SELECT EXISTS (SELECT * FROM "users" WHERE "users"."id" = $1)

-- @class orm
SELECT "users"."id" FROM "users" WHERE NOT EXISTS (SELECT 1 FROM "orders" WHERE "orders"."user_id" = "users"."id")

-- @class orm
-- @args 'paid'
UPDATE "orders" SET "status" = $1 WHERE "id" IN (SELECT "id" FROM "orders" WHERE "status" = 'new' LIMIT 10) RETURNING "id"

-- @class orm
-- @args 'tools'
SELECT category, percentile_cont(0.5) WITHIN GROUP (ORDER BY price) FROM products WHERE category = $1 GROUP BY category

-- @class orm
SELECT mode() WITHIN GROUP (ORDER BY status) FROM orders

-- @class orm
SELECT string_agg(email, ',' ORDER BY email) FROM users

-- @class orm
SELECT u.id, o.cnt FROM users u, LATERAL (SELECT count(*) AS cnt FROM orders WHERE user_id = u.id) o

-- @class orm
SELECT * FROM orders o FULL OUTER JOIN users u ON u.id = o.user_id

-- @class orm
SELECT * FROM users u JOIN orders o USING (id)

-- @class orm
SELECT * FROM users NATURAL JOIN orgs

-- @class orm
SELECT id FROM users UNION SELECT user_id FROM orders EXCEPT SELECT 99 INTERSECT SELECT 1

-- @class orm
VALUES (1, 'a'), (2, 'b')

-- @class orm
SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v(n, s) JOIN users u ON u.id = v.n

-- @class orm
TABLE orgs

-- @class orm
SELECT first_value(email) OVER (ORDER BY id), ntile(2) OVER (ORDER BY id), cume_dist() OVER (ORDER BY id) FROM users

-- @class orm
SELECT id FROM orders ORDER BY total DESC NULLS LAST FETCH FIRST 2 ROWS WITH TIES

-- @class orm
-- @args 1, 100
INSERT INTO accounts (id, balance) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + EXCLUDED.balance WHERE accounts.balance < 1000

-- sqlx / sqlc / pgx hand-written style.

-- @class orm
-- @args 1
-- name: GetUser :one
SELECT id, email, name, org_id, "createdAt" FROM users
WHERE id = $1 LIMIT 1

-- @class orm
-- name: ListUsers :many
SELECT id, email, name FROM users
ORDER BY name

-- @class orm
-- @args 'n@x.io', 'New'
-- name: CreateUser :one
INSERT INTO users (
  email, name
) VALUES (
  $1, $2
)
RETURNING *

-- @class orm
-- @args 1
-- name: DeleteUser :exec
DELETE FROM users
WHERE id = $1

-- @class orm
-- @args 1, 'Renamed'
-- name: UpdateUserName :exec
UPDATE users SET name = $2 WHERE id = $1

-- @class orm
-- @args '{1,2}'
SELECT id, email FROM users WHERE id = ANY($1::bigint[])

-- @class orm
-- @args '{a@x.io}'
SELECT * FROM users WHERE email = ANY($1::text[])

-- @class orm
-- @args 'acme'
SELECT u.* FROM users u JOIN orgs o ON o.id = u.org_id WHERE o.name = $1

-- @class orm
-- @args 1
SELECT o.id, o.total, coalesce(sum(i.qty * i.price), 0) AS items_total
FROM orders o LEFT JOIN order_items i ON i.order_id = o.id
WHERE o.user_id = $1
GROUP BY o.id

-- @class orm
-- @args 1, 10
SELECT * FROM orders WHERE user_id = $1 AND id > $2 ORDER BY id LIMIT 50

-- @class orm
-- @args 'beta'
SELECT id FROM users WHERE $1 = ANY(tags)

-- @class orm
-- @args '{beta,admin}'
SELECT id FROM users WHERE tags && $1::text[]

-- @class orm
-- @args '{"plan": "pro"}'
SELECT id FROM users WHERE profile @> $1::jsonb

-- @class orm
-- @args 'plan'
SELECT id FROM users WHERE profile ? $1

-- @class orm
SELECT id, profile #>> '{address,city}' AS city FROM users

-- @class orm
SELECT id, jsonb_path_query_array(profile, '$.address.city') FROM users

-- @class orm
-- @args 1, 2
SELECT EXISTS(SELECT 1 FROM orders WHERE user_id = $1 AND id = $2)

-- @class orm
-- @args 'acme'
INSERT INTO orgs (name) VALUES ($1) RETURNING id

-- @class orm
-- @args 1, 5
UPDATE accounts SET balance = balance - $2 WHERE id = $1 AND balance >= $2 RETURNING balance

-- @class orm
-- @args 'A-1', 'Anvil', 9
INSERT INTO products (sku, name, price) VALUES ($1, $2, $3)
ON CONFLICT (sku) DO UPDATE SET name = EXCLUDED.name, price = EXCLUDED.price
RETURNING id, (xmax = 0) AS inserted

-- @class orm
SELECT u.id, u.email, array_agg(o.id ORDER BY o.id) FILTER (WHERE o.id IS NOT NULL) AS order_ids
FROM users u LEFT JOIN orders o ON o.user_id = u.id GROUP BY u.id

-- @class orm
SELECT id, to_jsonb(u) - 'profile' AS doc FROM users u

-- @class orm
SELECT json_build_object('id', id, 'email', email) FROM users

-- @class orm
SELECT jsonb_agg(jsonb_build_object('sku', sku, 'qty', qty)) FROM order_items

-- @class orm
-- @args 1
SELECT row_to_json(t) FROM (SELECT id, email FROM users WHERE id = $1) t

-- @class orm
SELECT count(*) FILTER (WHERE status = 'paid') AS paid, count(*) AS all FROM orders

-- @class orm
-- @args 'a', 'b'
SELECT * FROM kv WHERE k IN ($1, $2)

-- @class orm
-- @time
-- @args 'a'
SELECT v FROM kv WHERE k = $1 AND (expires_at IS NULL OR expires_at > now())

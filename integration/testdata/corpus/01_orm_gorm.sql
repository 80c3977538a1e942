-- GORM-style statements: quoted identifiers, $n parameters, soft deletes,
-- RETURNING, ON CONFLICT. Plain reads are expected to be shared.

-- @class orm
SELECT * FROM "users" WHERE "users"."deleted_at" IS NULL ORDER BY "users"."id" LIMIT 1

-- @class orm
-- @args 1
SELECT * FROM "users" WHERE "users"."id" = $1 AND "users"."deleted_at" IS NULL ORDER BY "users"."id" LIMIT 1

-- @class orm
-- @args 'a@x.io'
SELECT * FROM "users" WHERE email = $1 AND "users"."deleted_at" IS NULL ORDER BY "users"."id" LIMIT 1

-- @class orm
SELECT count(*) FROM "users" WHERE "users"."deleted_at" IS NULL

-- @class orm
-- @args 1, 2
SELECT * FROM "orders" WHERE "orders"."user_id" IN ($1,$2)

-- @class orm
-- @args 'paid', 10, 0
SELECT "id","user_id","total","status" FROM "orders" WHERE status = $1 ORDER BY created_at desc LIMIT $2 OFFSET $3

-- @class orm
SELECT "users"."id","users"."email","users"."name","users"."org_id","users"."createdAt","users"."updated_at","users"."deleted_at" FROM "users" WHERE "users"."deleted_at" IS NULL

-- @class orm
SELECT "users"."id","users"."email","Org"."id" AS "Org__id","Org"."name" AS "Org__name" FROM "users" LEFT JOIN "orgs" "Org" ON "users"."org_id" = "Org"."id" WHERE "users"."deleted_at" IS NULL

-- @class orm
-- @args 'A%'
SELECT * FROM "products" WHERE name ILIKE $1

-- @class orm
-- @args 1
SELECT * FROM "order_items" WHERE "order_items"."order_id" = $1

-- @class orm
SELECT count(*) FROM (SELECT DISTINCT "status" FROM "orders") AS count_sub

-- @class orm
-- @args 'x@y.io', 'Xavier', 1, '{}', '{}'
INSERT INTO "users" ("email","name","org_id","profile","tags") VALUES ($1,$2,$3,$4,$5) RETURNING "id","createdAt"

-- @class orm
-- @args 'Zed', 1
UPDATE "users" SET "name"=$1,"updated_at"=now() WHERE "users"."deleted_at" IS NULL AND "id" = $2

-- @class orm
-- @args 2
UPDATE "users" SET "deleted_at"=now() WHERE "users"."id" = $1 AND "users"."deleted_at" IS NULL

-- @class orm
-- @args 3
DELETE FROM "orders" WHERE "orders"."id" = $1

-- @class orm
-- @args 'hits', 1
INSERT INTO "counters" ("name","n") VALUES ($1,$2) ON CONFLICT ("name") DO UPDATE SET "n"="excluded"."n"

-- @class orm
-- @args 'k', 'v'
INSERT INTO "kv" ("k","v") VALUES ($1,$2) ON CONFLICT DO NOTHING

-- @class orm
-- @args 1, 'A-1', 3, 1.5
INSERT INTO "order_items" ("order_id","sku","qty","price") VALUES ($1,$2,$3,$4) RETURNING "id"

-- @class orm
SELECT * FROM "users" WHERE "users"."deleted_at" IS NULL AND ("name" = 'Ann' OR "name" = 'Bob')

-- @class orm
SELECT "status", sum("total") as total FROM "orders" GROUP BY "status" HAVING sum(total) > 1

-- @class orm
-- @args 1
SELECT * FROM "users" WHERE "users"."id" = $1 FOR UPDATE

-- @class orm
SELECT * FROM "orders" WHERE created_at BETWEEN '2024-01-01' AND '2024-12-31'

-- @class orm
-- @args 1, 2, 3
SELECT * FROM "users" WHERE "users"."org_id" IN ($1,$2,$3) AND "users"."deleted_at" IS NULL

-- @class orm
SELECT * FROM "users" WHERE age > 18 AND "users"."deleted_at" IS NULL ORDER BY age DESC, id

-- @class orm
SELECT "users"."name", "orders"."total" FROM "users" INNER JOIN "orders" ON "orders"."user_id" = "users"."id"

-- @class orm
-- @args 'Oslo'
SELECT * FROM "users" WHERE profile->'address'->>'city' = $1

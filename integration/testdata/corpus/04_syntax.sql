-- Tricky PostgreSQL lexical syntax in plain reads and writes.

-- @class syntax
SELECT $$it's a 'dollar' string; DELETE FROM users$$ AS s

-- @class syntax
SELECT $tag$ nested $$ dollars $$ and ; semicolons $tag$ AS s, id FROM users

-- @class syntax
SELECT E'line\nbreak \' quote', id FROM users

-- @class syntax
SELECT E'\\' AS backslash, 'it''s' AS doubled FROM orgs

-- @class syntax
SELECT U&'d\0061t\+000061' AS unicode FROM orgs

-- @class syntax
SELECT /* outer /* nested DELETE FROM users; */ still comment */ id FROM users

-- @class syntax
SELECT id -- trailing comment with 'quote and ; semicolon
FROM users

-- @class syntax
SELECT "select", "from", "a""b", "ünï", "CamelCol" FROM "Weird Table"

-- @class syntax
SELECT t."select" + 1 FROM "Weird Table" AS t WHERE t."from" = 'x'

-- @class syntax
SELECT "group", "user", "limit" FROM "order" WHERE "limit" > 0

-- @class syntax
SELECT o."group" FROM "order" o ORDER BY o."user"

-- @class syntax
SELECT id::text, total::float8, '42'::int, CAST(status AS varchar(10)) FROM orders

-- @class syntax
SELECT '{1,2,3}'::int[] @> ARRAY[1], (ARRAY[[1,2],[3,4]])[1][2], (ARRAY[1,2,3])[2:3]

-- @class syntax
SELECT (u).* FROM users u

-- @class syntax
SELECT (u).email FROM users u

-- @class syntax
SELECT (o.meta->>'k')::int FROM orders o

-- @class syntax
SELECT id FROM users WHERE email ~* '^a' AND name !~ 'z' AND email LIKE '%%@%%' ESCAPE '!'

-- @class syntax
SELECT id FROM users WHERE name SIMILAR TO '(A|B)%' OR name IS DISTINCT FROM 'x'

-- @class syntax
SELECT 2 ^ 3, 7 % 3, |/ 16.0, @ -5, 5 & 3, 5 | 3, 5 # 3, ~5, 1 << 4

-- @class syntax
SELECT 'a' || 'b' || id::text FROM users

-- @class syntax
SELECT id FROM users WHERE (id, email) = (1, 'a@x.io')

-- @class syntax
SELECT id FROM users WHERE id OPERATOR(pg_catalog.=) 1

-- @class syntax
SELECT CASE WHEN age > 40 THEN 'old' WHEN age > 30 THEN 'mid' ELSE 'young' END FROM users

-- @class syntax
SELECT coalesce(name, email), nullif(age, 0), greatest(1, age), least(2, age) FROM users

-- @class syntax
SELECT id FROM users WHERE age BETWEEN SYMMETRIC 50 AND 10

-- @class syntax
SELECT x FROM generate_series(1, 3) AS x

-- @class syntax
SELECT * FROM unnest(ARRAY[1,2], ARRAY['a','b']) WITH ORDINALITY AS t(n, s, ord)

-- @class syntax
SELECT * FROM ROWS FROM (generate_series(1, 2), unnest(ARRAY['a'])) AS t(a, b)

-- @class syntax
SELECT * FROM jsonb_to_recordset('[{"a":1,"b":"x"}]') AS r(a int, b text)

-- @class syntax
SELECT * FROM jsonb_each_text('{"a":"1"}'::jsonb)

-- @class syntax
SELECT * FROM users WHERE profile @? '$.address ? (@.city == "Oslo")'

-- @class syntax
SELECT id FROM events WHERE during && tstzrange('2024-01-01', '2024-02-01')

-- @class syntax
SELECT 1.5e3, .5, 1e-3, B'101', X'1F'

-- @class syntax
SELECT interval '1 day' + interval '2 hours', '2024-01-01'::date + 1

-- @class syntax
SELECT timestamptz '2024-01-01 00:00:00+00' AT TIME ZONE 'UTC'

-- @class syntax
SELECT date '2024-01-01', time '12:00', timestamp '2024-01-01 10:00'

-- @class syntax
SELECT id FROM orders WHERE created_at > '2020-01-01'::timestamptz

-- @class syntax
SELECT extract(year FROM '2024-03-01'::date), date_part('month', '2024-03-01'::date)

-- @class syntax
SELECT substring('hello' FROM 2 FOR 3), position('l' IN 'hello'), overlay('hello' PLACING 'J' FROM 1 FOR 1), trim(BOTH 'x' FROM 'xhix')

-- @class syntax
SELECT id FROM users WHERE name IS NOT NULL AND active IS TRUE AND (deleted_at IS NULL) IS NOT FALSE

-- @class syntax
SELECT ROW(1, 'a') = ROW(1, 'a'), (1, 2) < (1, 3)

-- @class syntax
SELECT id FROM users WHERE id = ANY(SELECT user_id FROM orders) AND age > ALL(SELECT 1)

-- @class syntax
SELECT 'users'::regclass::oid > 0, 'int4'::regtype

-- @class syntax
SELECT 'users'::regclass::text

-- @class syntax
SELECT id FROM users ORDER BY 1 DESC LIMIT ALL OFFSET 0

-- @class syntax
-- @conservative TABLESAMPLE is refused by the scanner even with REPEATABLE
SELECT id FROM users TABLESAMPLE SYSTEM (100) REPEATABLE (1)

-- @class syntax
-- @expect any
SELECT id FROM users TABLESAMPLE BERNOULLI (50)

-- @class syntax
SELECT id FROM ONLY users

-- @class syntax
SELECT * FROM measurements WHERE logdate = '2024-06-01'

-- @class syntax
SELECT * FROM measurements_2024

-- @class syntax
SELECT 1 AS "1", 2 AS "Select", 3 AS "a ""quoted"" name"

-- @class syntax
SELECT count(*) AS "count(*)", sum(total) "sum" FROM orders

-- @class syntax
SELECT ts_rank(search, plainto_tsquery('simple', 'anvil')) FROM products WHERE search @@ to_tsquery('simple', 'anvil')

-- @class syntax
SELECT to_tsvector('simple', name) @@ plainto_tsquery('simple', 'anvil') FROM products

-- @class syntax
SELECT md5(email), sha256(email::bytea), encode(digest_placeholder, 'hex') FROM (SELECT email, '\x00'::bytea AS digest_placeholder FROM users) s

-- @class syntax
SELECT format('%I.%L', 'a', 'b'), quote_ident('Select'), concat_ws('-', 'a', 'b')

-- @class syntax
SELECT id FROM users WHERE email LIKE ANY (ARRAY['a%', 'b%'])

-- @class syntax
SELECT array_length(tags, 1), cardinality(tags), array_position(tags, 'beta'), tags[1] FROM users

-- @class syntax
SELECT profile - 'plan', profile || '{"x":1}', profile #- '{address,city}', jsonb_set(profile, '{plan}', '"x"') FROM users

-- @class syntax
SELECT jsonb_pretty(profile), jsonb_typeof(profile->'plan') FROM users

-- @class syntax
SELECT id FROM users WHERE (profile->>'plan') IN ('pro', 'free')

-- @class syntax
SELECT xmlelement(name foo, 'bar')::text

-- @class syntax
SELECT id FROM users WHERE id IN (1, 2) AND NOT (id = 3)

-- @class syntax
SELECT 'now' AS literal_word_not_a_time, 'today is a string' FROM orgs

-- @class syntax
SELECT "now", "today" FROM (SELECT 1 AS "now", 2 AS "today") s

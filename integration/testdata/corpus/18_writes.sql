-- Writes: DML, MERGE, data-modifying CTEs, SELECT INTO, locking reads, DDL,
-- TRUNCATE, COPY, maintenance. Never shared.

-- @class writes
INSERT INTO orgs (name) VALUES ('initech')

-- @class writes
INSERT INTO orgs (name) SELECT name || '2' FROM orgs

-- @class writes
INSERT INTO orgs DEFAULT VALUES RETURNING *

-- @class writes
UPDATE users SET age = age + 1

-- @class writes
UPDATE users u SET org_id = o.id FROM orgs o WHERE o.name = 'acme' AND u.id = 1

-- @class writes
UPDATE accounts SET (balance, owner) = (SELECT 0, 'x') WHERE id = 2

-- @class writes
DELETE FROM orders WHERE status = 'cancelled'

-- @class writes
DELETE FROM users USING orgs WHERE users.org_id = orgs.id AND orgs.name = 'globex'

-- @class writes
DELETE FROM kv WHERE k = 'x' RETURNING *

-- @class writes
MERGE INTO accounts a USING (VALUES (1, 10)) AS s(id, amt) ON a.id = s.id
WHEN MATCHED THEN UPDATE SET balance = a.balance + s.amt
WHEN NOT MATCHED THEN INSERT (id, balance) VALUES (s.id, s.amt)

-- @class writes
MERGE INTO counters c USING (SELECT 'hits' AS name) s ON c.name = s.name WHEN MATCHED THEN DELETE

-- @class writes
WITH moved AS (DELETE FROM staging_users RETURNING email, name)
INSERT INTO users (email, name) SELECT email, name FROM moved

-- @class writes
WITH upd AS (UPDATE orders SET status = 'archived' WHERE status = 'paid' RETURNING id)
SELECT count(*) FROM upd

-- @class writes
WITH ins AS (INSERT INTO audit_log (tbl, op) VALUES ('x', 'y') RETURNING id) SELECT id FROM ins

-- @class writes
WITH a AS (SELECT 1), b AS (DELETE FROM counters RETURNING name) SELECT * FROM a

-- @class writes
-- @expect never
SELECT * INTO TEMP TABLE tmp_users FROM users

-- @class writes
SELECT id, email INTO users_copy FROM users

-- @class writes
CREATE TABLE users_backup AS SELECT * FROM users

-- @class writes
SELECT * FROM users FOR UPDATE

-- @class writes
SELECT * FROM users WHERE id = 1 FOR NO KEY UPDATE

-- @class writes
SELECT * FROM orders FOR SHARE SKIP LOCKED

-- @class writes
SELECT * FROM orders o JOIN users u ON u.id = o.user_id FOR KEY SHARE OF o NOWAIT

-- @class writes
SELECT id FROM accounts WHERE balance > 0 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED

-- @class ddl
CREATE TABLE t_new (id int)

-- @class ddl
CREATE TABLE IF NOT EXISTS "T New" (id int, "select" text)

-- @class ddl
ALTER TABLE users ADD COLUMN nickname text

-- @class ddl
ALTER TABLE users ALTER COLUMN name SET NOT NULL

-- @class ddl
DROP TABLE IF EXISTS t_missing

-- @class ddl
CREATE INDEX users_email_lower ON users (lower(email))

-- @class ddl
CREATE INDEX CONCURRENTLY users_age ON users (age)

-- @class ddl
CREATE VIEW v_x AS SELECT 1 AS one

-- @class ddl
CREATE OR REPLACE FUNCTION f_new() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$

-- @class ddl
COMMENT ON TABLE users IS 'people'

-- @class ddl
GRANT SELECT ON users TO PUBLIC

-- @class ddl
CREATE SEQUENCE s_new

-- @class ddl
ALTER SEQUENCE order_seq RESTART WITH 5

-- @class ddl
REFRESH MATERIALIZED VIEW mv_order_totals

-- @class ddl
TRUNCATE orders CASCADE

-- @class ddl
TRUNCATE TABLE ONLY kv RESTART IDENTITY

-- @class ddl
DROP SCHEMA IF EXISTS nothing_here CASCADE

-- @class ddl
CREATE EXTENSION IF NOT EXISTS pgcrypto

-- @class ddl
-- @expect never
VACUUM users

-- @class ddl
-- @expect never
ANALYZE users

-- @class ddl
-- @expect never
CLUSTER users USING users_pkey

-- @class ddl
-- @expect never
REINDEX TABLE users

-- @class ddl
-- @expect never
LOCK TABLE accounts IN EXCLUSIVE MODE

-- @class writes
COPY users (email, name) FROM STDIN

-- @class writes
-- @nooracle
-- @expect never
COPY users TO STDOUT WITH (FORMAT csv)

-- @class writes
-- @nooracle
-- @expect never
COPY (SELECT id, email FROM users) TO STDOUT

-- @class writes
-- @calls nextval
INSERT INTO orders (id, user_id) VALUES (nextval('order_seq'), 1)

-- @class writes
UPDATE documents SET body = 'x' WHERE id = 1

-- @class writes
DELETE FROM kv WHERE k = 'zone'

-- @class writes
INSERT INTO measurements VALUES (1, '2024-05-01', 20)

-- @class writes
UPDATE v_active_users SET name = 'x' WHERE id = 1

-- @class writes
DELETE FROM tree WHERE id IN (WITH RECURSIVE d AS (SELECT 2 AS id) SELECT id FROM d)

-- @class writes
INSERT INTO events (kind, payload) VALUES ('k', '{"a": [1, 2]}'::jsonb) RETURNING id, at

-- @class writes
EXPLAIN ANALYZE DELETE FROM orders

-- @class writes
-- @args 1
UPDATE users SET active = NOT active WHERE id = $1

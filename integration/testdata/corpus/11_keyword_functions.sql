-- User functions named like keywords (set, zone, freeze, verbose, columns,
-- of, by, window, filter): all VOLATILE.

-- @calls set
SELECT set(5)

-- @calls set
SELECT "set"(6)

-- @calls set
SELECT id, set(1) FROM users

-- @calls zone
SELECT zone('Europe/Oslo')

-- @calls zone
SELECT id FROM users WHERE zone('UTC') IS NOT NULL

-- @calls freeze
SELECT freeze(1)

-- @calls freeze
SELECT * FROM accounts WHERE id = freeze(2)

-- @calls verbose
SELECT verbose()

-- @calls verbose
SELECT id FROM users WHERE verbose() = 1

-- @calls columns
SELECT columns()

-- @calls columns
SELECT * FROM columns()

-- @calls of
SELECT of(1)

-- @calls of
SELECT id FROM users WHERE id = of(1)

-- @calls by
SELECT by(1)

-- @calls by
SELECT id FROM users ORDER BY by(1)

-- @calls window
SELECT "window"(1)

-- @calls filter
SELECT "filter"('x')

-- @calls set, zone
SELECT set(1) + length(zone('x'))

-- @calls set
SELECT (SELECT set(2)) AS s

-- @calls freeze
SELECT count(*) FILTER (WHERE freeze(1) = 1) FROM users

-- @calls set
SELECT set  (3)

-- @calls of
SELECT of(id::int) FROM users

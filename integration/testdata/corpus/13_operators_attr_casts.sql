-- Functions reached without a visible call: user operators, attribute
-- notation, casts.

-- @calls vol_eq
SELECT 1 === 1

-- @calls vol_eq
SELECT id FROM users WHERE id::int === 1

-- @calls vol_eq
SELECT id FROM users WHERE org_id OPERATOR(===) 1

-- @calls jitter_add, random
SELECT 1 +~ 2

-- @calls jitter_add, random
SELECT age +~ 1 FROM users

-- @calls imm_close
SELECT id FROM products WHERE price ~= 5

-- @calls imm_close
SELECT 1.2 ~= 1.5

-- @calls touch
SELECT u.touch FROM users u

-- @calls touch
SELECT users.touch FROM users WHERE id = 1

-- @calls touch
SELECT (u).touch FROM users u

-- @calls touch
SELECT id FROM users u WHERE u.touch IS NOT NULL

-- @calls lucky, random
SELECT u.lucky FROM users u

-- @calls lucky, random
SELECT id FROM users u ORDER BY u.lucky

-- @calls fullname
SELECT u.fullname FROM users u

-- @calls fullname
SELECT fullname(u) FROM users u

-- @calls fullname
SELECT u.id FROM users u WHERE u.fullname LIKE 'A%'

-- @calls to_tagged, nextval
SELECT name::text::tagged FROM users

-- @calls to_tagged, nextval
SELECT CAST(email AS tagged) FROM users

-- @calls to_tagged, nextval
SELECT (email::tagged).label FROM users

-- @calls to_tagged, nextval
SELECT (email::text)::tagged FROM users

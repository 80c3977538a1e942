-- Time dependence: shared in flight, never cached under Options.Default's
-- TTL; cached only under the statement's own soft=/ttl=.

-- @calls now
-- @time
SELECT now()

-- @time
SELECT current_timestamp

-- @time
SELECT current_date, current_time

-- @time
SELECT localtimestamp, localtime

-- @time
SELECT CURRENT_TIMESTAMP(3)

-- @calls now
-- @time
SELECT * FROM orders WHERE created_at > now() - interval '1 day'

-- @time
SELECT * FROM orders WHERE created_at::date = current_date

-- @calls statement_timestamp
-- @time
SELECT statement_timestamp()

-- @calls transaction_timestamp
-- @time
SELECT transaction_timestamp()

-- @time
SELECT 'now'::timestamptz

-- @time
SELECT 'now'::timestamp, 'NOW'::date

-- @time
SELECT timestamptz 'now'

-- @time
SELECT date 'today'

-- @time
SELECT date 'tomorrow', date 'yesterday'

-- @time
SELECT 'today'::date, 'tomorrow'::timestamptz

-- @time
SELECT * FROM orders WHERE created_at >= 'yesterday'

-- @time
SELECT * FROM orders WHERE created_at < 'tomorrow'::timestamptz

-- @time
SELECT * FROM events WHERE at BETWEEN 'today' AND 'tomorrow'

-- @time
SELECT CAST('now' AS timestamptz)

-- @time
SELECT ' Today '::date

-- @time
SELECT 'epoch'::timestamptz < 'now'::timestamptz

-- @calls age
-- @time
SELECT age(timestamptz '2000-01-01')

-- @calls date_trunc, now
-- @time
SELECT date_trunc('hour', now())

-- @calls now
-- @time
SELECT id FROM sessions WHERE valid_until > now()

-- @calls now
-- @time
SELECT /* sqlflight: ttl=5s */ count(*) FROM orders WHERE created_at > now() - interval '1 hour'

-- @time
-- sqlflight: soft=30s
SELECT * FROM orders WHERE created_at > 'today'

-- @calls now
-- @time
SELECT /* sqlflight: coalesce */ now()

-- @calls now
-- @time
WITH t AS (SELECT now() AS ts) SELECT ts FROM t

-- @calls now
-- @time
SELECT * FROM kv WHERE expires_at IS NULL OR expires_at > now()

-- @calls to_char, now
-- @time
SELECT to_char(now(), 'YYYY-MM-DD')

-- @calls extract
-- @time
SELECT extract(epoch FROM current_timestamp)::bigint

-- @time
SELECT date_part('year', current_date)

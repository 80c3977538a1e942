-- Views over tables (plain reads), over volatile functions, nested views,
-- materialized views.

-- @class views
SELECT * FROM v_active_users

-- @args 1
SELECT email FROM v_active_users WHERE id = $1

-- @class views
SELECT * FROM v_user_totals ORDER BY total DESC NULLS LAST

-- @class views
SELECT * FROM v_nested

-- @class views
SELECT a.email, t.total FROM v_active_users a JOIN v_user_totals t USING (id)

-- @class views
SELECT * FROM mv_order_totals

-- @calls random
SELECT * FROM v_random_user

-- @calls random
SELECT id FROM v_random_user WHERE id = 1

-- @calls random
SELECT count(*) FROM v_random_user

-- @calls random
SELECT * FROM v_nested_random

-- @calls pg_total_relation_size
SELECT * FROM v_sizes

-- @calls pg_total_relation_size
SELECT bytes > 0 FROM v_sizes

-- @calls log_access
SELECT * FROM v_logged

-- @calls log_access
SELECT id FROM v_logged LIMIT 1

-- @calls date_trunc, now
-- @time
SELECT * FROM v_today_orders

-- @calls date_trunc, now
-- @time
SELECT count(*) FROM v_today_orders

-- @calls user_email
SELECT * FROM v_emails

-- @calls pg_backend_pid
-- @session
SELECT pid FROM v_backend

-- @calls random
SELECT u.email FROM users u JOIN v_random_user r ON r.id = u.id

-- @calls random
WITH r AS (SELECT * FROM v_random_user) SELECT count(*) FROM r

package sqlscan_test

import (
	"fmt"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

func ExampleScan() {
	r := sqlscan.Scan(`/* sqlflight: soft=30s */ SELECT * FROM public.products WHERE id = $1`)
	fmt.Println(r.Kind, r.Verdict, r.Tables, r.Annotation, r.Params)
	fmt.Println(r.Normalized)

	r = sqlscan.Scan(`WITH d AS (DELETE FROM carts WHERE expired RETURNING *) SELECT count(*) FROM d`)
	fmt.Println(r.Verdict, r.Reason, r.Writes)

	r = sqlscan.Scan(`SELECT * FROM orders WHERE created_at > now() - interval '1 hour'`)
	fmt.Println(r.Verdict, r.Reason)
	// Output:
	// SELECT shareable [products] soft=30s 1
	// SELECT * FROM public.products WHERE id = $1
	// never data-modifying CTE [carts]
	// in-flight-only calls now (time-dependent)
}

func ExampleParse_transaction() {
	r := sqlscan.Parse("BEGIN; UPDATE accounts SET balance = balance - 10 WHERE id = 1; COMMIT")
	for _, st := range r.Statements {
		fmt.Println(st.Kind, st.Tx, st.Writes)
	}
	fmt.Println(r.Verdict, r.Reason)
	// Output:
	// BEGIN begin []
	// UPDATE none [accounts]
	// COMMIT commit []
	// never multiple statements
}

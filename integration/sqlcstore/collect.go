package sqlcstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// AuthorSummary is one author with their books, read by name: its fields
// are not in the columns' order, which RowToStructByName does not need.
type AuthorSummary struct {
	Books         int64          `db:"books" json:"books"`
	LastPublished pgtype.Date    `db:"last_published" json:"last_published"`
	Name          string         `db:"name" json:"name"`
	ID            int64          `db:"id" json:"id"`
	Tags          []string       `db:"tags" json:"tags"`
	TotalPrice    pgtype.Numeric `db:"total_price" json:"total_price"`
}

const authorSummaries = `-- name: AuthorSummaries :many
SELECT a.id, a.name, a.tags, count(b.id) AS books,
       sum(b.price) AS total_price, max(b.published) AS last_published
FROM authors a
LEFT JOIN books b ON b.author_id = a.id
WHERE a.active = $1
GROUP BY a.id
ORDER BY a.id
`

// AuthorSummaries returns the summaries of the active (or inactive)
// authors, collected with pgx.CollectRows and pgx.RowToStructByName.
func (q *Queries) AuthorSummaries(ctx context.Context, active bool) ([]AuthorSummary, error) {
	rows, err := q.db.Query(ctx, authorSummaries, active)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[AuthorSummary])
}

// CollectAuthors is ListAuthors' statement collected into sqlc's own
// model by its db tags, so that it shares ListAuthors' results.
func (q *Queries) CollectAuthors(ctx context.Context) ([]Author, error) {
	rows, err := q.db.Query(ctx, listAuthors)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[Author])
}

const authorByName = `-- name: AuthorByName :one
SELECT id, name, bio, tags, nicknames, born, birthday, balance, rating, active, visits, ident, meta, created_at FROM authors
WHERE name = $1
`

// AuthorByName returns the one author named name (pgx.ErrNoRows when
// there is none, pgx.ErrTooManyRows when there are more), collected with
// pgx.CollectExactlyOneRow.
func (q *Queries) AuthorByName(ctx context.Context, name string) (Author, error) {
	rows, err := q.db.Query(ctx, authorByName, name)
	if err != nil {
		return Author{}, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Author])
}

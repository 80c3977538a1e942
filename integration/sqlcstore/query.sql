-- name: GetAuthor :one
SELECT * FROM authors
WHERE id = $1 LIMIT 1;

-- name: ListAuthors :many
SELECT * FROM authors
ORDER BY id;

-- name: ListAuthorsByTag :many
SELECT id, name, tags FROM authors
WHERE sqlc.arg(tag)::text = ANY(tags)
ORDER BY name;

-- name: CountAuthors :one
SELECT count(*) FROM authors;

-- name: CreateAuthor :one
INSERT INTO authors (
    name, bio, tags, nicknames, born, birthday, balance, rating, active, visits, ident, meta
) VALUES (
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12
)
RETURNING *;

-- name: UpdateAuthorBio :exec
UPDATE authors
SET bio = $2
WHERE id = $1;

-- name: AddTag :exec
UPDATE authors
SET tags = array_append(tags, sqlc.arg(tag)::text)
WHERE id = sqlc.arg(id);

-- name: AdjustBalances :execrows
UPDATE authors
SET balance = balance + sqlc.arg(delta)::numeric
WHERE active AND balance IS NOT NULL;

-- name: DeleteAuthor :execresult
DELETE FROM authors
WHERE id = $1;

-- name: CreateAuthors :copyfrom
INSERT INTO authors (name, bio, tags, born, balance) VALUES ($1, $2, $3, $4, $5);

-- name: CreateBook :one
INSERT INTO books (author_id, title, price, published)
VALUES ($1, $2, $3, $4)
RETURNING id;

-- name: ListBooksByAuthor :many
SELECT b.id, b.title, b.price, b.published, a.name AS author_name
FROM books b
JOIN authors a ON a.id = b.author_id
WHERE b.author_id = $1
ORDER BY b.id;

-- name: AuthorBookCounts :many
SELECT a.id, a.name, count(b.id) AS books, sum(b.price)::numeric AS total_price
FROM authors a
LEFT JOIN books b ON b.author_id = a.id
GROUP BY a.id, a.name
ORDER BY a.id;

-- name: SetVisits :batchexec
UPDATE authors
SET visits = $2
WHERE id = $1;

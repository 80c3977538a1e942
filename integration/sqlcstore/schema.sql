-- The tables the sqlc tests create in a schema of their own (the pool's
-- search_path names it), so that sqlc's fixed SQL needs no table names of
-- its own per test.

CREATE TABLE authors (
    id         bigserial   PRIMARY KEY,
    name       text        NOT NULL,
    bio        text,
    tags       text[]      NOT NULL DEFAULT '{}',
    nicknames  text[],
    born       timestamptz,
    birthday   date,
    balance    numeric(12, 2),
    rating     double precision,
    active     boolean     NOT NULL DEFAULT true,
    visits     integer     NOT NULL DEFAULT 0,
    ident      uuid,
    meta       jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE books (
    id        bigserial PRIMARY KEY,
    author_id bigint    NOT NULL REFERENCES authors (id) ON DELETE CASCADE,
    title     text      NOT NULL,
    price     numeric,
    published date
);

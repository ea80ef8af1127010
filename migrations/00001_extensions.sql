-- +goose Up
-- gen_random_uuid() is built in since PostgreSQL 13; pgcrypto is not needed.
CREATE SCHEMA IF NOT EXISTS public;

-- +goose Down
SELECT 1;

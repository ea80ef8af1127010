-- +goose Up
-- An instance that failed before it ever ran gives back its GPU, host room and quota at once;
-- its record stays (with its failure reason) and released_at says it holds nothing any more, so
-- its deletion does not release a second time and its host no longer keeps it.
ALTER TABLE instances ADD COLUMN released_at timestamptz;

-- +goose Down
ALTER TABLE instances DROP COLUMN released_at;

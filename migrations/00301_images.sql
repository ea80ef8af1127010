-- +goose Up
-- Images operators register: where hostd fetches each from, the SHA-256 it must have, the disk
-- it needs, and whether it carries gpucloud's guest libraries. Instances name their image; a
-- create naming no registered image is refused. Deleted images stay (soft delete) so instances
-- created from them keep their source.
CREATE TABLE images (
    id              uuid PRIMARY KEY,
    name            text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    source          text NOT NULL CHECK (source ~ '^(file|https?)://'),
    sha256          text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    min_disk_gib    integer NOT NULL CHECK (min_disk_gib BETWEEN 1 AND 65536),
    guest_libraries boolean NOT NULL DEFAULT false,
    description     text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    deleted_at      timestamptz
);
CREATE UNIQUE INDEX images_live_name ON images (name) WHERE deleted_at IS NULL;

-- +goose Down
DROP TABLE images;

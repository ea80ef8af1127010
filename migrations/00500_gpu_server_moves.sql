-- +goose Up
-- A drain that moves work (issue 18): one row per instance a GPU server's drain moves (or could
-- not move). The target's GPUs are reserved when the move is planned (gpu_server_move_gpus, and
-- gpus.reserved_bytes), in the drain's transaction; the instance keeps its reservations on the
-- source until the source's gpuserverd reports the move done, when they are swapped.
CREATE TABLE gpu_server_moves (
    id             uuid PRIMARY KEY,
    instance_id    uuid NOT NULL REFERENCES instances (id),
    source_id      uuid NOT NULL REFERENCES gpu_servers (id),
    target_id      uuid REFERENCES gpu_servers (id),
    -- unplaced: no target had room (reason says why); pending: planned, not yet started by the
    -- source; moving: the source reports it under way; done / failed: the source's outcome.
    state          text NOT NULL CHECK (state IN ('unplaced', 'pending', 'moving', 'done', 'failed')),
    reason         text NOT NULL DEFAULT '',
    sessions_moved integer NOT NULL DEFAULT 0 CHECK (sessions_moved >= 0),
    bytes_copied   bigint NOT NULL DEFAULT 0 CHECK (bytes_copied >= 0),
    bytes_total    bigint NOT NULL DEFAULT 0 CHECK (bytes_total >= 0),
    pause_ms       double precision NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    CHECK ((state = 'unplaced') = (target_id IS NULL))
);
CREATE INDEX gpu_server_moves_source ON gpu_server_moves (source_id, created_at);
CREATE INDEX gpu_server_moves_instance ON gpu_server_moves (instance_id);
-- At most one move of an instance is open at a time.
CREATE UNIQUE INDEX gpu_server_moves_one_open ON gpu_server_moves (instance_id) WHERE state IN ('pending', 'moving');

CREATE TABLE gpu_server_move_gpus (
    move_id   uuid NOT NULL REFERENCES gpu_server_moves (id),
    gpu_id    uuid NOT NULL REFERENCES gpus (id),
    bytes     bigint NOT NULL CHECK (bytes > 0),
    dedicated boolean NOT NULL,
    PRIMARY KEY (move_id, gpu_id)
);

-- +goose Down
DROP TABLE gpu_server_move_gpus, gpu_server_moves;

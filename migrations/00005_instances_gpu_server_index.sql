-- +goose Up
-- Operators draining a GPU server poll its live instances (GET /v1/instances?gpu_server_id=),
-- as instances_host serves the drain of a host.
CREATE INDEX instances_gpu_server ON instances (gpu_server_id) WHERE state <> 'deleted';

-- +goose Down
DROP INDEX instances_gpu_server;

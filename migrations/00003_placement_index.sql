-- +goose Up
-- Placement walks GPUs of a model from the fullest to the emptiest (see apiserver/placement);
-- this index lets it stop at the first fitting, unlocked GPU instead of sorting them all.
-- It replaces gpus_free: one index fewer to maintain on every reservation.
CREATE INDEX gpus_pack ON gpus (gpu_model_id, reserved_bytes DESC) WHERE healthy;
DROP INDEX gpus_free;

-- +goose Down
CREATE INDEX gpus_free ON gpus (gpu_model_id, gpu_server_id) WHERE healthy;
DROP INDEX gpus_pack;

-- +goose Up
-- Placement walks GPUs of a model from the fullest to the emptiest (see apiserver/placement);
-- this index lets it stop at the first fitting, unlocked GPU instead of sorting them all.
CREATE INDEX gpus_pack ON gpus (gpu_model_id, reserved_bytes DESC) WHERE healthy;

-- +goose Down
DROP INDEX gpus_pack;

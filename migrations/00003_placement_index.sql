-- +goose Up
-- Placement walks GPUs of a model from the fullest to the emptiest (see apiserver/placement);
-- this index lets it stop at the first fitting, unlocked GPU instead of sorting them all.
-- gpus_free stays: without an index leading on the GPU server the planner falls back to
-- scanning every GPU (measured: PostgreSQL CPU per create went from ~2 ms to ~18 ms).
CREATE INDEX gpus_pack ON gpus (gpu_model_id, reserved_bytes DESC) WHERE healthy;

-- +goose Down
DROP INDEX gpus_pack;

-- +goose Up
-- Shared slices go to the GPU with the least free memory that still fits (best fit). Walking
-- gpus_pack from the fullest GPU made every create step over all the GPUs already full, a cost
-- that grew with the fleet's use; this index starts the walk at the first GPU with room.
CREATE INDEX gpus_fit ON gpus (gpu_model_id, (memory_bytes - reserved_bytes)) WHERE healthy;

-- +goose Down
DROP INDEX gpus_fit;

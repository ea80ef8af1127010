-- +goose Up
-- An Idempotency-Key's claim (status 0: its first request is being served) is leased: the
-- apiserver serving the request renews lease_until while it runs. A claim whose lease ran out was
-- left by an apiserver that died mid-request (a kill, a crash), and a retry with the same key and
-- request takes it over and runs the request, instead of being told "still being served" for
-- ever. claim_id names the claim's current holder: only it stores the answer or releases the key.
-- Claims left before this migration have no lease (-infinity): a retry takes them over at once.
ALTER TABLE idempotency_keys
    ADD COLUMN claim_id uuid,
    ADD COLUMN lease_until timestamptz NOT NULL DEFAULT '-infinity';

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN claim_id, DROP COLUMN lease_until;

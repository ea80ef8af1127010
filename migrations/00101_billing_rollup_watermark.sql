-- +goose Up
-- Hourly rollups derived from the raw records by a snapshot watermark instead of a pending table:
-- each record is written once (billing_usage_pending doubled the writes: an insert per batch and
-- a delete per flush, both WAL-logged).
--
-- xid is the inserting transaction's id. A flush reads the records visible to its own snapshot but
-- not to the previous flush's (billing_rollup_watermark.snap): every committed record is added once,
-- a transaction still running at a flush is picked up by a later one, an aborted one never.
-- Rows stored before this migration are already in the rollups or in billing_usage_pending
-- (which the flush still drains): their xid 0 is older than any snapshot.
ALTER TABLE billing_usage_records ADD COLUMN xid bigint NOT NULL DEFAULT 0;
ALTER TABLE billing_usage_records ALTER COLUMN xid SET DEFAULT pg_current_xact_id()::text::bigint;
-- BRIN: rows are appended in roughly xid order, so block ranges find the new rows of a flush for
-- a few bytes per 16 pages and almost no cost per insert (a btree would be another descent per
-- row). The flush summarises new ranges itself (the table's insert autovacuum is off).
CREATE INDEX billing_usage_records_xid ON billing_usage_records USING brin (xid) WITH (pages_per_range = 16);

CREATE TABLE billing_rollup_watermark (
    singleton boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    snap      pg_snapshot NOT NULL
);
INSERT INTO billing_rollup_watermark (snap) VALUES (pg_current_snapshot());

-- +goose Down
DROP TABLE billing_rollup_watermark;
DROP INDEX billing_usage_records_xid;
ALTER TABLE billing_usage_records DROP COLUMN xid;

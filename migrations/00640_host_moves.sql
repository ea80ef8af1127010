-- +goose Up
-- A VM host's drain that moves work (issue 18, item 4): one row per instance a host's drain moves
-- (or could not move). The target host's room (vcpus, memory, disk) is reserved when the move is
-- planned, in the drain's transaction; the instance keeps its room on the source until the target's
-- hostd reports the move done, when the source's room is given back and host_id swapped.
--
-- Restart mode: pending (the source stops the VM and offers its disks) -> copying (the target pulls
-- them from the source's transfer endpoint with the move's secret, defines and starts the VM) ->
-- done or failed. The instance's state does not change on the way (the tenant holds the VM
-- throughout: billing's allocations stay open, no gap and no second interval).
ALTER TABLE hosts ADD COLUMN transfer_endpoint text NOT NULL DEFAULT '';

CREATE TABLE host_moves (
    id           uuid PRIMARY KEY,
    instance_id  uuid NOT NULL REFERENCES instances (id),
    source_id    uuid NOT NULL REFERENCES hosts (id),
    target_id    uuid REFERENCES hosts (id),
    mode         text NOT NULL CHECK (mode IN ('restart', 'live')),
    state        text NOT NULL CHECK (state IN ('unplaced', 'pending', 'copying', 'done', 'failed')),
    reason       text NOT NULL DEFAULT '',
    -- note: what the operator should know of a move that went ahead (a live move that fell back).
    note         text NOT NULL DEFAULT '',
    -- the target room reserved for the move (the instance's size when planned)
    vcpus        integer NOT NULL DEFAULT 0 CHECK (vcpus >= 0),
    memory_mib   integer NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
    disk_gib     integer NOT NULL DEFAULT 0 CHECK (disk_gib >= 0),
    -- admits the target to the source's transfer endpoint for this move's files only
    secret       text NOT NULL DEFAULT '',
    bytes_copied bigint NOT NULL DEFAULT 0 CHECK (bytes_copied >= 0),
    bytes_total  bigint NOT NULL DEFAULT 0 CHECK (bytes_total >= 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    CHECK ((state = 'unplaced') = (target_id IS NULL))
);
CREATE INDEX host_moves_source ON host_moves (source_id, created_at);
CREATE INDEX host_moves_target ON host_moves (target_id) WHERE state IN ('pending', 'copying');
-- At most one move of an instance is open at a time.
CREATE UNIQUE INDEX host_moves_one_open ON host_moves (instance_id) WHERE state IN ('pending', 'copying');

-- +goose Down
DROP TABLE host_moves;
ALTER TABLE hosts DROP COLUMN transfer_endpoint;

-- +goose Up
-- Session revocation (issue 13, finding 2): when an instance placed on a GPU server stops or is
-- deleted, that GPU server must refuse its session tokens and end its sessions within a second.
-- Every state change writes an instance_events row, so one trigger there tells the apiserver's
-- listeners which GPU server to wake (payload: its id); they answer its long-poll with the
-- instances whose tokens it must refuse (GET /v1/agent/gpu-server/revocations).
-- +goose StatementBegin
CREATE FUNCTION gpucloud_notify_revocation() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gs uuid;
BEGIN
    SELECT gpu_server_id INTO gs FROM instances WHERE id = NEW.instance_id;
    IF gs IS NOT NULL THEN
        PERFORM pg_notify('gpucloud_revocations', gs::text);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER instance_events_revocation AFTER INSERT ON instance_events FOR EACH ROW
    WHEN (NEW.to_state IN ('stopping', 'stopped', 'deleting', 'deleted'))
    EXECUTE FUNCTION gpucloud_notify_revocation();
-- The revocation query reads the ended transitions of the last token lifetime.
CREATE INDEX instance_events_ended ON instance_events (at)
    WHERE to_state IN ('stopping', 'stopped', 'deleting', 'deleted');

-- +goose Down
DROP INDEX instance_events_ended;
DROP TRIGGER instance_events_revocation ON instance_events;
DROP FUNCTION gpucloud_notify_revocation();

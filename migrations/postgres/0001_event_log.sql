-- The event log: append-only, hash-chained, one row per event.
-- `position` is assigned by the writer holding the head row lock, never by a sequence, so
-- position order is commit order and readers can never skip a row.
CREATE TABLE events (
    position        BIGINT  PRIMARY KEY,
    event_id        UUID    NOT NULL UNIQUE,
    stream_id       TEXT    NOT NULL,
    stream_version  BIGINT  NOT NULL CHECK (stream_version >= 1),
    event_type      TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL,
    recorded_at_us  BIGINT  NOT NULL,
    payload         TEXT    NOT NULL,
    metadata        TEXT    NOT NULL,
    hash            BYTEA   NOT NULL CHECK (octet_length(hash) = 32),
    UNIQUE (stream_id, stream_version)
);

-- Events are immutable: the database refuses edits and deletes from any client.
CREATE FUNCTION events_are_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are immutable';
END;
$$;

CREATE TRIGGER events_are_immutable
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_are_immutable();

CREATE TRIGGER events_are_immutable_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_are_immutable();

-- The head of the chain: last position and its hash. Every append locks and moves it.
CREATE TABLE event_log_head (
    id             SMALLINT PRIMARY KEY CHECK (id = 1),
    last_position  BIGINT   NOT NULL,
    last_hash      BYTEA    NOT NULL CHECK (octet_length(last_hash) = 32)
);
INSERT INTO event_log_head (id, last_position, last_hash) VALUES (1, 0, '\x0000000000000000000000000000000000000000000000000000000000000000');

-- Where each projection has folded up to; written in the same transaction as its rows.
CREATE TABLE projection_checkpoints (
    projection     TEXT   PRIMARY KEY,
    position       BIGINT NOT NULL CHECK (position >= 0),
    updated_at_us  BIGINT NOT NULL
);

-- The event log: append-only, hash-chained, one row per event.
-- `position` is assigned by the single writer under the head lock, never by the database, so
-- position order is commit order and readers can never skip a row.
CREATE TABLE events (
    position        INTEGER PRIMARY KEY,
    event_id        BLOB    NOT NULL UNIQUE CHECK (length(event_id) = 16),
    stream_id       TEXT    NOT NULL,
    stream_version  INTEGER NOT NULL CHECK (stream_version >= 1),
    event_type      TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL,
    recorded_at_us  INTEGER NOT NULL,
    payload         TEXT    NOT NULL,
    metadata        TEXT    NOT NULL,
    hash            BLOB    NOT NULL CHECK (length(hash) = 32),
    UNIQUE (stream_id, stream_version)
);

-- Events are immutable: the database refuses edits and deletes from any client.
CREATE TRIGGER events_are_immutable_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are immutable');
END;

CREATE TRIGGER events_are_immutable_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are immutable');
END;

-- The head of the chain: last position and its hash. Every append locks and moves it.
CREATE TABLE event_log_head (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    last_position  INTEGER NOT NULL,
    last_hash      BLOB    NOT NULL CHECK (length(last_hash) = 32)
);
INSERT INTO event_log_head (id, last_position, last_hash) VALUES (1, 0, zeroblob(32));

-- Where each projection has folded up to; written in the same transaction as its rows.
CREATE TABLE projection_checkpoints (
    projection     TEXT    PRIMARY KEY,
    position       INTEGER NOT NULL CHECK (position >= 0),
    updated_at_us  INTEGER NOT NULL
);

-- Snapshots of the read models a process keeps in memory (ADR 0007): a process starts from the
-- newest one its binary can read and folds only the events after it. A snapshot is derived
-- data: deleting it costs a slower start, nothing else; `audit verify` checks it against the log.
CREATE TABLE read_model_snapshots (
    name          TEXT   NOT NULL PRIMARY KEY,
    -- The log position the snapshot folded through.
    position      BIGINT NOT NULL,
    -- The snapshot's format: a binary reads only its own.
    format        BIGINT NOT NULL,
    body          TEXT   NOT NULL,
    written_at_us BIGINT NOT NULL
);

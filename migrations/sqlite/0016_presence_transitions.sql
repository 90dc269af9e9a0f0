-- The stored presence history (ADR 0007): every machine's online and offline transitions, for
-- ever, so memory keeps only a month of them per machine. Written by the projection runner with
-- its checkpoint `presence` in one transaction; one row per `fleet.machine_online` or
-- `fleet.machine_offline` event, keyed by its log position (the row id).
CREATE TABLE presence_transitions (
    position   INTEGER PRIMARY KEY,
    machine_id TEXT    NOT NULL,
    -- 1: the machine went online; 0: offline.
    online     INTEGER NOT NULL,
    -- When: the heartbeat that brought it online, or the last one before it went offline.
    at_us      BIGINT  NOT NULL
);
-- A machine's transitions from an instant on, and the last one before it.
CREATE INDEX presence_transitions_by_machine ON presence_transitions (machine_id, at_us, position);

-- A reservation belongs to a live owner (the server process handling it, which renews its lease
-- while the request runs), and records the log positions its request committed, written in the
-- same transaction as the events. A retry after the owner died takes over at once when nothing
-- was committed, and never runs a committed request again.
ALTER TABLE idempotency_keys ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys ADD COLUMN lease_until_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idempotency_keys ADD COLUMN committed_position INTEGER NOT NULL DEFAULT 0;

-- The rebuild that currently owns a projection's `*_rebuild` tables. Every rebuild transaction
-- checks it still owns them, so two rebuilds can never mix their rows; a newer rebuild takes
-- over and the older one stops without swapping. The row is deleted by the swap.
CREATE TABLE projection_rebuilds (
    projection     TEXT    PRIMARY KEY,
    run_id         BLOB    NOT NULL CHECK (length(run_id) = 16),
    position       INTEGER NOT NULL,
    started_at_us  INTEGER NOT NULL
);

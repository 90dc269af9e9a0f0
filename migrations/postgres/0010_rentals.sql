-- The stored rentals projection (ADR 0007): every rental with its whole folded state, so memory
-- keeps only open rentals. Written by the projection runner with its checkpoint `rentals` in
-- one transaction.
CREATE TABLE rentals (
    rental_id     TEXT   NOT NULL PRIMARY KEY,
    renter_id     TEXT   NOT NULL,
    model_id      TEXT   NOT NULL,
    started_at_us BIGINT NOT NULL,
    -- When it ended; 9223372036854775807 while it has not, so "still running at t" is one range.
    until_us      BIGINT NOT NULL,
    -- The rental stream's version in the state: what an append after it expects.
    stream_version BIGINT NOT NULL,
    -- The folded state (gpunex_projections::market::RentalState) as JSON.
    state         TEXT   NOT NULL
);
-- A renter's rentals, newest first (rental ids are UUIDv7: time-ordered).
CREATE INDEX rentals_by_renter ON rentals (renter_id, rental_id);
-- The rentals of a model still running at or after an instant (price recommendations).
CREATE INDEX rentals_by_model ON rentals (model_id, until_us);

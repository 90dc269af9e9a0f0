-- The stored earnings projection (ADR 0007): one row per metered usage line with its provider's
-- running sums through it, the rentals the lines refer to, and each provider's place in the fold.
-- Written by the projection runner with its checkpoint `earnings` in one transaction.

CREATE TABLE earnings_rentals (
    rental_id   TEXT NOT NULL PRIMARY KEY,
    renter_id   TEXT NOT NULL,
    provider_id TEXT NOT NULL,
    machine_id  TEXT NOT NULL,
    model_id    TEXT NOT NULL,
    -- The rental's GPU UUIDs in its order, a JSON array (shares follow this order).
    gpu_uuids   TEXT NOT NULL
);

CREATE TABLE earnings_lines (
    -- One usage event, one line: the log position is the key.
    position            BIGINT NOT NULL PRIMARY KEY,
    provider_id         TEXT   NOT NULL,
    -- When it was metered, never before the provider's previous line.
    at_us               BIGINT NOT NULL,
    entry_id            TEXT   NOT NULL,
    report_id           TEXT   NOT NULL,
    rental_id           TEXT   NOT NULL,
    from_gpu_seconds    BIGINT NOT NULL,
    to_gpu_seconds      BIGINT NOT NULL,
    price_micro_usdc    BIGINT NOT NULL,
    gross_micro_usdc    BIGINT NOT NULL,
    fee_micro_usdc      BIGINT NOT NULL,
    net_micro_usdc      BIGINT NOT NULL,
    fee_bp              BIGINT NOT NULL,
    -- The provider's sums through this line, so a range's total is two lookups.
    through_gross       BIGINT NOT NULL,
    through_fee         BIGINT NOT NULL,
    through_net         BIGINT NOT NULL,
    through_gpu_seconds BIGINT NOT NULL,
    through_lines       BIGINT NOT NULL
);
-- Date ranges (dashboard totals, statements) and position ranges (what a payout settled).
CREATE INDEX earnings_lines_by_date ON earnings_lines (provider_id, at_us, position);
CREATE INDEX earnings_lines_by_position ON earnings_lines (provider_id, position);

CREATE TABLE earnings_providers (
    provider_id         TEXT   NOT NULL PRIMARY KEY,
    last_at_us          BIGINT NOT NULL,
    through_gross       BIGINT NOT NULL,
    through_fee         BIGINT NOT NULL,
    through_net         BIGINT NOT NULL,
    through_gpu_seconds BIGINT NOT NULL,
    through_lines       BIGINT NOT NULL
);

-- The stored price history (ADR 0007): every price a provider set, for ever, so memory keeps
-- only the prices that can still be in force and those set in the last day. Written by the
-- projection runner with its checkpoint `prices` in one transaction; one row per
-- `market.price_set` event, keyed by its log position (the row id).
CREATE TABLE price_history (
    position          INTEGER PRIMARY KEY,
    provider_id       TEXT    NOT NULL,
    model_id          TEXT    NOT NULL,
    price_micro_usdc  INTEGER NOT NULL CHECK (typeof(price_micro_usdc) = 'integer'),
    effective_at_us   BIGINT  NOT NULL,
    set_at_us         BIGINT  NOT NULL,
    set_by            TEXT    NOT NULL
);
-- A provider's prices in log order (the prices page and API).
CREATE INDEX price_history_by_provider ON price_history (provider_id, position);

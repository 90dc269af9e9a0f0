-- The stored payouts projection (ADR 0007): every payout with its whole life and every batch
-- with its rolled-forward balances and bank files, so memory keeps only open payouts and batch
-- heads. Written by the projection runner with its checkpoint `payouts` in one transaction.
CREATE TABLE payouts (
    payout_id          TEXT   NOT NULL PRIMARY KEY,
    provider_id        TEXT   NOT NULL,
    batch_id           TEXT   NOT NULL,
    -- The log position of its payout.scheduled: a batch lists its payouts in this order.
    scheduled_position BIGINT NOT NULL,
    -- solana or bank, and scheduled, submitted, confirmed or failed (the payout queues).
    rail               TEXT   NOT NULL,
    status             TEXT   NOT NULL,
    amount_micro_usdc  BIGINT NOT NULL,
    -- The folded record (gpunex_projections::payouts::PayoutRecord) as JSON.
    state              TEXT   NOT NULL
);
-- A provider's payouts in the order they were scheduled.
CREATE INDEX payouts_by_provider ON payouts (provider_id, scheduled_position);
-- A batch's payouts, a page at a time.
CREATE INDEX payouts_by_batch ON payouts (batch_id, scheduled_position);
-- The payout queues: how many and how much at each status on each rail.
CREATE INDEX payouts_by_status ON payouts (status, rail, amount_micro_usdc);

CREATE TABLE payout_batches (
    batch_id         TEXT   NOT NULL PRIMARY KEY,
    payout_date      TEXT   NOT NULL,
    -- The log position of its payout.batch_created; 0 while an interrupted run has not created it.
    created_position BIGINT NOT NULL,
    -- The folded batch (gpunex_projections::payout_history::StoredBatch) as JSON.
    state            TEXT   NOT NULL
);
CREATE INDEX payout_batches_by_date ON payout_batches (payout_date, created_position);

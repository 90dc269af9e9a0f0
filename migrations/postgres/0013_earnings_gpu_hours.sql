-- Each GPU's earnings per UTC hour (ADR 0007, "Earnings by the hour"): part of the stored
-- earnings projection, written with its lines and its checkpoint `earnings` in one transaction
-- (`gpunex_projections::earnings_lines::HourSums`). A period's per-GPU and per-model figures are
-- its whole hours' rows (a month of 8 GPUs: at most 5,952 rows, against about 23,000 lines for
-- the busiest simulated provider) plus the lines of the hours a period's bound cuts (zones whose
-- day starts on a half or quarter hour) or that hold lines folded after the reader's position.
CREATE TABLE earnings_gpu_hours (
    provider_id          TEXT   NOT NULL,
    -- The hour's first microsecond (UTC, a multiple of 3,600,000,000).
    hour_us              BIGINT NOT NULL,
    gpu_uuid             TEXT   NOT NULL,
    model_id             TEXT   NOT NULL,
    -- The GPU's shares of its lines (GPU i of n gets a div n, plus one when i < a mod n).
    gross_micro_usdc     BIGINT NOT NULL,
    fee_micro_usdc       BIGINT NOT NULL,
    -- gross - fee of the shares.
    net_micro_usdc       BIGINT NOT NULL,
    gpu_seconds          BIGINT NOT NULL,
    -- The lines the GPU was in.
    gpu_lines            BIGINT NOT NULL,
    -- The lines' own net and number, on the row of each line's first GPU only.
    model_net_micro_usdc BIGINT NOT NULL,
    model_lines          BIGINT NOT NULL,
    -- The last log position folded into the row.
    through_position     BIGINT NOT NULL,
    PRIMARY KEY (provider_id, hour_us, gpu_uuid, model_id)
        INCLUDE (gross_micro_usdc, fee_micro_usdc, net_micro_usdc, gpu_seconds, gpu_lines,
                 model_net_micro_usdc, model_lines, through_position)
);
-- The lines' date index goes back to its narrow form (migration 0008): the amounts were in it
-- (0011) for the grouped read of a period's every line, which the hours replace; the lines now
-- read by date are a few hours' (and a statement's, which reads whole rows anyway).
DROP INDEX earnings_lines_by_date;
CREATE INDEX earnings_lines_by_date ON earnings_lines (provider_id, at_us, position);
-- The hours start empty: the earnings projection is folded again from the start of the log, in
-- one transaction with emptying it, so its lines and hours always come from the same fold.
DELETE FROM earnings_lines;
DELETE FROM earnings_rentals;
DELETE FROM earnings_providers;
UPDATE projection_checkpoints SET position = 0 WHERE projection = 'earnings';

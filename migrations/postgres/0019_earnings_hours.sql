-- The earnings hours are stored one row per provider and UTC hour (ADR 0017), holding the GPU
-- rows of that hour compactly encoded (`gpunex_store::earnings_hours`), instead of one row per
-- GPU and hour (migration 0013): a rebuild writes about a fifth of the rows. Within a provider
-- dates never go backwards, so only a provider's last hour is ever added to again; the fold
-- reads it back and the hour is written whole.
CREATE TABLE earnings_hours (
    provider_id      TEXT   NOT NULL,
    -- The hour's first microsecond (UTC, a multiple of 3,600,000,000).
    hour_us          BIGINT NOT NULL,
    -- The last log position folded into any of the hour's GPU rows.
    through_position BIGINT NOT NULL,
    -- The hour's GPU rows: each GPU's shares of its lines under each model, with the lines' own
    -- net and number on the row of each line's first GPU.
    gpus             BYTEA  NOT NULL,
    PRIMARY KEY (provider_id, hour_us)
);
-- The projection is folded again from the start of the log, in one transaction with emptying
-- it, so its runs, rentals, providers and hours come from the same fold.
DROP TABLE earnings_gpu_hours;
DELETE FROM earnings_line_runs;
DELETE FROM earnings_rentals;
DELETE FROM earnings_providers;
UPDATE projection_checkpoints SET position = 0 WHERE projection = 'earnings';
-- A provider with many GPUs has an hour past the 2 KB threshold: compressed with lz4, as the
-- runs are (migration 0018), where the server has it.
DO $$
BEGIN
    ALTER TABLE earnings_hours ALTER COLUMN gpus SET COMPRESSION lz4;
EXCEPTION
    WHEN feature_not_supported OR invalid_parameter_value THEN
        RAISE NOTICE 'lz4 is not available on this server: earnings hours are compressed with pglz';
END
$$;

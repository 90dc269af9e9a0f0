-- The earnings lines are stored in runs (ADR 0013): one row per provider and per written page,
-- holding that page's lines of the provider in position order, compactly encoded
-- (`gpunex_store::earnings_runs`), instead of one row per line under two indexes. Within a
-- provider dates never go backwards, so a provider's runs cover consecutive ranges of both
-- positions and dates: a range of lines is a range of runs. The running sums are not stored per
-- line: a run holds the provider's sums before its first line.
CREATE TABLE earnings_line_runs (
    provider_id        TEXT   NOT NULL,
    -- The positions and dates of the run's first and last lines.
    first_position     BIGINT NOT NULL,
    last_position      BIGINT NOT NULL,
    first_at_us        BIGINT NOT NULL,
    last_at_us         BIGINT NOT NULL,
    -- The provider's sums through the line before the run's first.
    before_gross       BIGINT NOT NULL,
    before_fee         BIGINT NOT NULL,
    before_net         BIGINT NOT NULL,
    before_gpu_seconds BIGINT NOT NULL,
    before_lines       BIGINT NOT NULL,
    lines              BLOB   NOT NULL,
    PRIMARY KEY (provider_id, first_position)
);
-- Date ranges (the run holding a provider's last line before an instant).
CREATE INDEX earnings_line_runs_by_date ON earnings_line_runs (provider_id, first_at_us, first_position);
-- `audit verify`, which reads every provider's runs in log order.
CREATE INDEX earnings_line_runs_by_position ON earnings_line_runs (first_position);
-- The projection is folded again from the start of the log, in one transaction with emptying
-- it, so its runs, rentals, providers and hours come from the same fold.
DROP TABLE earnings_lines;
DELETE FROM earnings_rentals;
DELETE FROM earnings_providers;
DELETE FROM earnings_gpu_hours;
UPDATE projection_checkpoints SET position = 0 WHERE projection = 'earnings';

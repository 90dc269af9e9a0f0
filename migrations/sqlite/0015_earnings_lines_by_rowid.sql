-- A line's log position becomes the table's row id. Declared `BIGINT PRIMARY KEY` (0008), it
-- was an ordinary column with its own unique index beside SQLite's hidden row id, so every line
-- written went into three b-trees besides the two secondary indexes; only a column declared
-- exactly `INTEGER PRIMARY KEY` is the row id itself. The rows are copied as they are (same
-- columns, same order), and the secondary indexes are made again under their names
-- (`LINE_INDEXES` in `store/src/earnings.rs`). PostgreSQL keeps 0008's table: a heap with its
-- primary-key index is already one b-tree per key there.
CREATE TABLE earnings_lines_by_rowid (
    position            INTEGER PRIMARY KEY,
    provider_id         TEXT   NOT NULL,
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
    through_gross       BIGINT NOT NULL,
    through_fee         BIGINT NOT NULL,
    through_net         BIGINT NOT NULL,
    through_gpu_seconds BIGINT NOT NULL,
    through_lines       BIGINT NOT NULL
);
INSERT INTO earnings_lines_by_rowid SELECT position, provider_id, at_us, entry_id, report_id,
    rental_id, from_gpu_seconds, to_gpu_seconds, price_micro_usdc, gross_micro_usdc,
    fee_micro_usdc, net_micro_usdc, fee_bp, through_gross, through_fee, through_net,
    through_gpu_seconds, through_lines FROM earnings_lines ORDER BY position;
DROP TABLE earnings_lines;
ALTER TABLE earnings_lines_by_rowid RENAME TO earnings_lines;
CREATE INDEX earnings_lines_by_date ON earnings_lines (provider_id, at_us, position);
CREATE INDEX earnings_lines_by_position ON earnings_lines (provider_id, position);

-- The earnings runs' encoded lines are compressed with lz4 rather than pglz (ADR 0015): a page's
-- runs are written in the catch-up's commit, where pglz spent about as long compressing them as
-- the rest of the commit's statements took (runs of ~9 KB: pglz 4.4 KB, lz4 4.9 KB, measured on
-- the 1.18M-event bench log). Only new values are compressed with lz4; stored ones are read as
-- they are. A server built without lz4 keeps pglz: the setting is left as it was.
DO $$
BEGIN
    ALTER TABLE earnings_line_runs ALTER COLUMN lines SET COMPRESSION lz4;
EXCEPTION
    WHEN feature_not_supported OR invalid_parameter_value THEN
        RAISE NOTICE 'lz4 is not available on this server: earnings runs stay compressed with pglz';
END
$$;

-- The latest output of renters' jobs, as their agents ship it (issue 17; docs/agent.md, "Job
-- logs"). Kept outside the event log: it is the renter's data, not a fact the ledger proves, and
-- it is bounded per rental (`gpunex_store::job_logs::KEEP_BYTES`): the oldest chunks are
-- deleted as new ones arrive.
CREATE TABLE job_log_chunks (
    rental_id    TEXT   NOT NULL,
    -- Where the chunk starts in the job's whole output (bytes the agent read before it).
    byte_offset  BIGINT NOT NULL,
    data         BLOB   NOT NULL,
    -- When the server stored it (microseconds since the Unix epoch).
    received_us  BIGINT NOT NULL,
    PRIMARY KEY (rental_id, byte_offset)
);

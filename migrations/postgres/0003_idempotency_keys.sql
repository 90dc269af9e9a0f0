-- Responses to POST requests that carried an `Idempotency-Key`, per caller: a retry with the
-- same key and body gets the stored response; the same key with another body is refused.
-- `status` 0 marks a request still being handled.
CREATE TABLE idempotency_keys (
    caller          TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    request_sha256  TEXT    NOT NULL,
    status          INTEGER NOT NULL,
    body            TEXT    NOT NULL,
    created_at_us   BIGINT  NOT NULL,
    PRIMARY KEY (caller, key)
);

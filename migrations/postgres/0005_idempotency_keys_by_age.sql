-- Expired keys are purged on every reservation: find them without a scan.
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at_us);

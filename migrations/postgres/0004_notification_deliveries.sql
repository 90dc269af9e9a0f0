-- Notifications sent through SMTP, by message id (the event id): a restart from an older outbox
-- checkpoint does not send them again. (The mailbox directory needs no table: the file is the
-- record.)
CREATE TABLE notification_deliveries (
    message_id      TEXT   NOT NULL PRIMARY KEY,
    delivered_at_us BIGINT NOT NULL
);

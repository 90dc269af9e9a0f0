-- Presence and telemetry of provider machines: high-frequency facts kept outside the event log.
-- The log records state changes (registered, online, offline); these tables hold the last
-- heartbeat per machine and bounded per-GPU time series (see docs/agent.md for retention).

-- The last heartbeat the platform received from each machine (server clock).
CREATE TABLE machine_presence (
    machine_id        TEXT   NOT NULL PRIMARY KEY,
    provider_id       TEXT   NOT NULL,
    last_heartbeat_us BIGINT NOT NULL,
    heartbeats        BIGINT NOT NULL
);

-- One row per GPU per heartbeat, pruned after the retention period.
CREATE TABLE gpu_telemetry (
    gpu_uuid            TEXT   NOT NULL,
    at_us               BIGINT NOT NULL,
    machine_id          TEXT   NOT NULL,
    utilization_pct     BIGINT,
    memory_used_mib     BIGINT,
    temperature_c       BIGINT,
    power_draw_mw       BIGINT,
    sm_clock_mhz        BIGINT,
    clock_event_reasons BIGINT,
    ecc_corrected       BIGINT,
    ecc_uncorrected     BIGINT,
    PRIMARY KEY (gpu_uuid, at_us)
);
CREATE INDEX gpu_telemetry_by_age ON gpu_telemetry (at_us);

-- The latest sample of each GPU, for dashboards (never pruned; replaced by each heartbeat).
CREATE TABLE gpu_telemetry_latest (
    gpu_uuid            TEXT   NOT NULL PRIMARY KEY,
    at_us               BIGINT NOT NULL,
    machine_id          TEXT   NOT NULL,
    utilization_pct     BIGINT,
    memory_used_mib     BIGINT,
    temperature_c       BIGINT,
    power_draw_mw       BIGINT,
    sm_clock_mhz        BIGINT,
    clock_event_reasons BIGINT,
    ecc_corrected       BIGINT,
    ecc_uncorrected     BIGINT
);
CREATE INDEX gpu_telemetry_latest_by_machine ON gpu_telemetry_latest (machine_id);

-- The platform's own liveness: each server ticks it every few seconds. A gap on start is a
-- platform outage, recorded as an event and never counted as provider downtime.
CREATE TABLE platform_liveness (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    last_tick_us BIGINT NOT NULL
);

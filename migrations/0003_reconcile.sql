-- callgate state, version 3: reconciliation receipts.
-- One row per divergence episode between the three session counters
-- (ledger_open_sessions, runtime_active_sessions, routing_reported_sessions)
-- that outlived [ledger].divergence_window_s. The counters are never
-- overwritten to agree; this row says what was seen and what was done.

CREATE TABLE reconciliation_receipts (
    id               bigserial   PRIMARY KEY,
    instance         text        NOT NULL,
    -- leaked_or_delayed_cleanup | false_capacity_or_lost_ownership |
    -- balancer_may_overload | stranded_capacity
    direction        text        NOT NULL,
    -- which counter the correction trusted: ledger | runtime | routing
    source_of_truth  text        NOT NULL,
    -- the divergence in sessions when the receipt was written
    sessions         bigint      NOT NULL CHECK (sessions > 0),
    -- the three readings at that moment (NULL: unknown)
    ledger_open      bigint,
    runtime_active   bigint,
    routing_reported bigint,
    -- the calls on the wrong side, where they can be named (ledger vs
    -- runtime: open rows with no live call, or live calls with no open row)
    affected_calls   uuid[]      NOT NULL DEFAULT '{}',
    -- what was done; "none: reported" when nothing was
    correction       text        NOT NULL,
    suspected_cause  text        NOT NULL,
    -- wall-clock start of the episode and the receipt's write time
    diverged_since   timestamptz NOT NULL,
    recorded_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX reconciliation_receipts_instance_idx
    ON reconciliation_receipts (instance, recorded_at);

-- callgate state, version 1.
-- Every per-call table hangs off call_ledger; per-turn writes are fenced on
-- call_ledger.owner_epoch by the application (see state-store's write module).

-- One authoritative receipt per admitted call. No personal data lives here:
-- retention purges turns and slots but keeps this row.
CREATE TABLE call_ledger (
    call_id                  uuid        PRIMARY KEY,
    owner_instance           text        NOT NULL,
    owner_epoch              bigint      NOT NULL DEFAULT 1 CHECK (owner_epoch > 0),
    ingress                  text        NOT NULL,
    carrier_call_id          text,
    admitted_at              timestamptz NOT NULL,
    admission_wait_ms        bigint      NOT NULL CHECK (admission_wait_ms >= 0),
    media_ready_at           timestamptz,
    first_playable_audio_at  timestamptz,
    last_media_at            timestamptz,
    disconnect_observed_at   timestamptz,
    cleanup_completed_at     timestamptz,
    end_reason               text,
    cleanup_status           text        NOT NULL DEFAULT 'pending'
                             CHECK (cleanup_status IN ('pending', 'completed', 'failed')),
    -- counter deltas, media / interaction / delegation / recovery stats,
    -- writes_lost (merged in by the write-behind when the close lands)
    stats                    jsonb       NOT NULL DEFAULT '{}'::jsonb
);

-- retention scans by admission time
CREATE INDEX call_ledger_admitted_at_idx ON call_ledger (admitted_at);
-- ledger_open_sessions per instance, without scanning closed calls
CREATE INDEX call_ledger_open_by_owner_idx ON call_ledger (owner_instance)
    WHERE cleanup_status = 'pending';

-- Raw lifecycle events, kept alongside the ledger summary.
CREATE TABLE call_events (
    call_id  uuid        NOT NULL REFERENCES call_ledger (call_id) ON DELETE CASCADE,
    seq      bigint      NOT NULL CHECK (seq >= 0),
    at       timestamptz NOT NULL,
    kind     text        NOT NULL,
    detail   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (call_id, seq)
);

-- The transcript, one row per turn (personal data: purged by retention).
CREATE TABLE call_turns (
    call_id      uuid        NOT NULL REFERENCES call_ledger (call_id) ON DELETE CASCADE,
    seq          bigint      NOT NULL CHECK (seq >= 0),
    speaker      text        NOT NULL CHECK (speaker IN ('caller', 'bot')),
    text         text        NOT NULL,
    started_at   timestamptz NOT NULL,
    ended_at     timestamptz NOT NULL,
    interrupted  boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (call_id, seq)
);

-- Slot-filling progress (personal data: purged by retention).
CREATE TABLE call_slots (
    call_id     uuid        NOT NULL REFERENCES call_ledger (call_id) ON DELETE CASCADE,
    name        text        NOT NULL,
    value       text        NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (call_id, name)
);

-- Mutable per-call flags.
CREATE TABLE call_state (
    call_id            uuid        PRIMARY KEY REFERENCES call_ledger (call_id) ON DELETE CASCADE,
    escalated          boolean     NOT NULL DEFAULT false,
    escalation_reason  text,
    escalated_at       timestamptz,
    updated_at         timestamptz NOT NULL
);

-- Calls the admission gate refused: countable, but never in the ledger.
CREATE TABLE admission_rejections (
    call_id          uuid        PRIMARY KEY,
    instance         text        NOT NULL,
    ingress          text        NOT NULL,
    carrier_call_id  text,
    reason           text        NOT NULL,
    waited_ms        bigint      NOT NULL CHECK (waited_ms >= 0),
    at               timestamptz NOT NULL
);

CREATE INDEX admission_rejections_at_idx ON admission_rejections (at);

-- callgate state, version 4: what each instance declared about itself.
-- The auditor (state-store's audit module) compares admissions with these
-- declarations: a call admitted after its owner's latest 'draining', with
-- no later 'started' or 'undrained', is a violation. Rows are written off
-- the call path (a drain never waits for its own row) and never updated.
-- A new table: no lock on any existing one.

CREATE TABLE instance_events (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance  text        NOT NULL,
    -- the instance's own clock, the same clock its ledger rows' admitted_at
    -- comes from, so the two compare without cross-host skew
    at        timestamptz NOT NULL,
    kind      text        NOT NULL CHECK (kind IN ('started', 'draining', 'undrained')),
    detail    jsonb       NOT NULL DEFAULT '{}'::jsonb
);

-- "the latest declaration of this instance before this admission"
CREATE INDEX instance_events_instance_at_idx ON instance_events (instance, at);

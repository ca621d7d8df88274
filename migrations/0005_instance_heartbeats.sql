-- callgate state, version 5: owner liveness for fencing across instances.
-- Each instance beats here every [ownership].heartbeat_interval_ms; a live
-- instance closes the open call_ledger rows of an owner whose beat is older
-- than [ownership].lease_ms (end_reason 'owner_lost'), and an instance
-- starting closes the rows its name owned before ('instance_restart').
-- Every comparison uses this database's clock (now()), never an instance's,
-- so a lease means the same on every host whatever their clocks say.
-- A new table: no lock on any existing one.

CREATE TABLE instance_heartbeats (
    -- server.instance: the name call_ledger.owner_instance records
    instance    text        PRIMARY KEY,
    -- the process (one boot) currently beating under this name; a new boot
    -- replaces it, and a beat from any other boot is refused (superseded)
    boot        uuid        NOT NULL,
    -- when this boot claimed the name (database clock)
    started_at  timestamptz NOT NULL DEFAULT now(),
    -- this boot's latest beat (database clock): the lease runs from here
    beat_at     timestamptz NOT NULL DEFAULT now()
);

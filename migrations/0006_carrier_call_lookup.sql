-- callgate state, version 6: find a session by the carrier's own call id.
-- A caller (a Twilio CallSid, a SIP Call-ID, a partner's call id) knows only
-- the id its carrier gave the call; GET /v1/sessions?carrier_call_id=...
-- answers with the session ids (and owners) that id was recorded under.
-- Partial, like the partner index: calls without a carrier id are not
-- indexed. The build takes a SHARE lock on call_ledger for its duration
-- (writes wait; reads do not) — on a large ledger, migrate off-peak.

CREATE INDEX call_ledger_carrier_call_id_idx ON call_ledger (carrier_call_id)
    WHERE carrier_call_id IS NOT NULL;

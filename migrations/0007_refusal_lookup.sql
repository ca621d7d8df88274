-- callgate state, version 7: find a refused call by the carrier's own id.
-- GET /v1/sessions?carrier_call_id=... answers with the refusals recorded
-- under that id beside the admitted sessions, so a carrier that was turned
-- away can learn why from the id it knows. Partial, like the ledger's index:
-- refusals without a carrier id (a WebRTC offer) are found by call_id alone.
-- The build takes a SHARE lock on admission_rejections for its duration
-- (refusal writes wait in their queue; reads do not) — on a large table,
-- migrate off-peak.

CREATE INDEX admission_rejections_carrier_call_id_idx
    ON admission_rejections (carrier_call_id)
    WHERE carrier_call_id IS NOT NULL;

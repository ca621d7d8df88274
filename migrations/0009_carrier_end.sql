-- callgate state, version 9: the carrier's own account of how a call ended.
-- A receipt's end_reason is what callgate observed (the stream closed, the
-- caller hung up); the carrier may know more (Twilio's status callback: the
-- call completed, was busy, failed, its billed duration). Recorded beside
-- callgate's, never over it: {"status", "duration_s", "at", "source"}.
-- NULL until the carrier says. A nullable column without a default is a
-- catalog-only change.

ALTER TABLE call_ledger ADD COLUMN carrier_end jsonb NULL;

-- callgate state, version 2: the partner a call came in through.
-- NULL for calls with no partner and for every row written before this
-- migration. A nullable column without a default is a catalog-only change
-- (no table rewrite). The index build takes a SHARE lock on call_ledger for
-- its duration (the runner applies each migration in one transaction, so it
-- cannot be CONCURRENTLY): ledger inserts wait meanwhile, which is brief on
-- a ledger that retention keeps to its window.

ALTER TABLE call_ledger ADD COLUMN partner_id text NULL;
ALTER TABLE admission_rejections ADD COLUMN partner_id text NULL;

-- per-partner reporting, without indexing the calls that have no partner
CREATE INDEX call_ledger_partner_id_idx ON call_ledger (partner_id)
    WHERE partner_id IS NOT NULL;

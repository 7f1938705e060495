-- effectfence ledger, schema version 8: the hand edits of intents that
-- schema 7 let through, each of which could make a fenced intent's next
-- prepare fresh, are refused too.
--
-- REPLACE INTO intents (or INSERT OR REPLACE, or an upsert's INSERT) deletes
-- the row in its way without firing DELETE triggers, whether it meets the
-- intent's name or its rowid (an UPDATE OR REPLACE of rowid likewise), so
-- an INSERT may not meet an existing row and a rowid never changes.
-- effectfence itself inserts an intent only when no row has its name, and
-- changes one with UPDATE. An older server still running on the ledger has
-- its upserts refused by this (docs/OPERATIONS.md: stop those first).
CREATE TRIGGER intents_replaced_never BEFORE INSERT ON intents
WHEN EXISTS (SELECT 1 FROM intents WHERE intent = NEW.intent)
  OR EXISTS (SELECT 1 FROM intents WHERE rowid = NEW.rowid)
BEGIN SELECT RAISE(ABORT, 'effectfence: an intent cannot be replaced: this name or rowid is already recorded, and an INSERT may only add a new intent (a REPLACE would delete the row without the checks on deletes, and its next prepare would be fresh); change it with UPDATE, clear it with INSERT INTO clears(intent, operator, reason). (An effectfence server older than this ledger''s schema 8 writes this way: stop it and restart it at the new version)'); END;
CREATE TRIGGER intents_renumbered_never BEFORE UPDATE OF rowid ON intents
WHEN NEW.rowid IS NOT OLD.rowid
BEGIN SELECT RAISE(ABORT, 'effectfence: an intent''s rowid cannot be changed: an UPDATE OR REPLACE would delete the row it meets without the checks on deletes'); END;

-- A failed intent leaves that state only through a clear; an unknown one
-- also when its holder's late commit or abort arrives (done, failed), as
-- effectfence records it. Set to in_flight or done by hand, a fenced
-- intent could be taken over or deleted, and its effect run again.
CREATE TRIGGER intents_fenced_kept BEFORE UPDATE OF state ON intents
WHEN (OLD.state = 'failed' OR OLD.state = 'unknown') AND NEW.state IS NOT OLD.state AND
     NEW.state IS NOT 'cleared' AND
     NOT (OLD.state = 'unknown' AND (NEW.state = 'failed' OR NEW.state = 'done'))
BEGIN SELECT RAISE(ABORT, 'effectfence: a failed or unknown intent stays fenced until it is cleared: reconcile it, then INSERT INTO clears(intent, operator, reason)'); END;

-- An intent is done when its certificate is recorded, in the same
-- transaction (effectfence inserts the certificate first).
CREATE TRIGGER intents_done_with_certificate BEFORE UPDATE OF state ON intents
WHEN NEW.state = 'done' AND OLD.state IS NOT 'done' AND NOT EXISTS (
  SELECT 1 FROM certificates WHERE hash = NEW.cert_hash AND intent = NEW.intent AND generation = NEW.generation)
BEGIN SELECT RAISE(ABORT, 'effectfence: an intent is done only with the certificate of its effect, which fence_commit records'); END;

-- A hand UPDATE to cleared passes only where the clear it names is of this
-- attempt (the same generation): a clear of an earlier attempt, re-admitted
-- and fenced since, does not stand for this one.
DROP TRIGGER intents_cleared_through_clears;
CREATE TRIGGER intents_cleared_through_clears BEFORE UPDATE OF state ON intents
WHEN NEW.state = 'cleared' AND OLD.state IS NOT 'cleared' AND (NOT EXISTS (
  SELECT 1 FROM clears
   WHERE intent = NEW.intent AND requested_at = NEW.updated_at AND previous_state = OLD.state) OR NOT EXISTS (
  SELECT 1 FROM events
   WHERE intent = NEW.intent AND kind = 'cleared' AND at = NEW.updated_at AND generation = OLD.generation))
BEGIN SELECT RAISE(ABORT, 'effectfence: clear an intent with INSERT INTO clears(intent, operator, reason), which records who cleared it and why; a hand UPDATE of its state would not be audited'); END;

-- Certificates are a rowid table too: a REPLACE naming an existing
-- certificate's rowid, with a new hash and seq, would delete it. (Any
-- UPDATE, of rowid too, is refused by certificates_immutable_update.)
DROP TRIGGER certificates_immutable_replace;
CREATE TRIGGER certificates_immutable_replace BEFORE INSERT ON certificates
WHEN EXISTS (SELECT 1 FROM certificates WHERE hash = NEW.hash)
  OR EXISTS (SELECT 1 FROM certificates WHERE domain = NEW.domain AND seq = NEW.seq)
  OR EXISTS (SELECT 1 FROM certificates WHERE rowid = NEW.rowid)
BEGIN SELECT RAISE(ABORT, 'effectfence: certificates are immutable: this hash, (domain, seq) or rowid is already recorded'); END;

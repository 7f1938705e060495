-- effectfence ledger, schema version 8: an intent's row cannot be replaced.
--
-- REPLACE INTO intents (or INSERT OR REPLACE, or an upsert's INSERT) deletes
-- the row in its way without firing DELETE triggers, so it could put a
-- fresh row over a fenced intent past intents_unfinished_kept: its next
-- prepare would be fresh, with nothing in the audit trail. effectfence
-- itself now inserts an intent only when no row has its name, and changes
-- one with UPDATE, so an INSERT may not meet an existing row. An older
-- server still running on the ledger has its upserts refused by this
-- (fail closed); docs/OPERATIONS.md says to stop those before upgrading.
CREATE TRIGGER intents_replaced_never BEFORE INSERT ON intents
WHEN EXISTS (SELECT 1 FROM intents WHERE intent = NEW.intent)
BEGIN SELECT RAISE(ABORT, 'effectfence: an intent cannot be replaced: REPLACE deletes its row without the checks on deletes, and its next prepare would be fresh; change it with UPDATE, clear it with INSERT INTO clears(intent, operator, reason)'); END;

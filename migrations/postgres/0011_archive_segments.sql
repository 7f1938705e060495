-- effectfence ledger on PostgreSQL, schema version 11: archive segments
-- (see migrations/0013_archive_segments.sql). `effectfence archive` writes
-- and syncs a segment file, then in one transaction deletes its rows and
-- records it here; every other deletion stays refused.
--
-- The triggers keep their names (the runbook lists them); only what they
-- run changes: an UPDATE is refused as before, a DELETE only inside the
-- archive's deletion window, of rows older than its cutoff that no live
-- intent, domain head or unfinished attempt needs.
CREATE TABLE archives (
  segment      bigint PRIMARY KEY CHECK (segment >= 1),
  ledger_id    text NOT NULL CHECK (length(ledger_id) = 32),
  file         text NOT NULL,
  root         text NOT NULL CHECK (length(root) = 64),
  previous     text,
  before_ms    bigint NOT NULL,
  first_at     bigint,
  last_at      bigint,
  certificates bigint NOT NULL CHECK (certificates >= 0),
  signatures   bigint NOT NULL CHECK (signatures >= 0),
  events       bigint NOT NULL CHECK (events >= 0),
  clears       bigint NOT NULL CHECK (clears >= 0),
  key_id       text,
  archived_at  bigint NOT NULL
);

-- The deletion window: one row, inserted and deleted inside the archive's
-- own transaction, so no other transaction ever sees it.
CREATE TABLE archive_in_progress (
  one       integer PRIMARY KEY CHECK (one = 1),
  root      text NOT NULL CHECK (length(root) = 64),
  before_ms bigint NOT NULL
);

-- Numbered in order, chained, of one ledger, and only by the archive that
-- opened the deletion window for this very root.
CREATE FUNCTION effectfence_archives_chained() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.segment IS DISTINCT FROM coalesce((SELECT max(segment) FROM archives), 0) + 1
     OR NEW.previous IS DISTINCT FROM (SELECT root FROM archives WHERE segment = NEW.segment - 1)
     OR NEW.ledger_id IS DISTINCT FROM coalesce((SELECT ledger_id FROM archives WHERE segment = 1), NEW.ledger_id)
     OR NOT EXISTS (SELECT 1 FROM archive_in_progress WHERE root = NEW.root) THEN
    RAISE EXCEPTION 'effectfence: an archive segment is recorded only by effectfence archive, next in order, chained to the one before';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER archives_chained BEFORE INSERT ON archives
FOR EACH ROW EXECUTE FUNCTION effectfence_archives_chained();
CREATE TRIGGER archives_immutable BEFORE UPDATE OR DELETE ON archives
FOR EACH ROW EXECUTE FUNCTION effectfence_refuse('effectfence: archive records are immutable');
CREATE TRIGGER archives_immutable_truncate BEFORE TRUNCATE ON archives
FOR EACH STATEMENT EXECUTE FUNCTION effectfence_refuse('effectfence: archive records are immutable');

-- Closed only once the segment it deleted into is recorded.
CREATE FUNCTION effectfence_archive_window_closed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM archives WHERE root = OLD.root) THEN
    RAISE EXCEPTION 'effectfence: an archive''s deletion window closes only with the record of its segment';
  END IF;
  RETURN OLD;
END $$;
CREATE TRIGGER archive_in_progress_recorded BEFORE DELETE ON archive_in_progress
FOR EACH ROW EXECUTE FUNCTION effectfence_archive_window_closed();
CREATE TRIGGER archive_in_progress_fixed BEFORE UPDATE ON archive_in_progress
FOR EACH ROW EXECUTE FUNCTION effectfence_refuse('effectfence: an archive''s deletion window cannot be changed');
CREATE TRIGGER archive_in_progress_not_truncated BEFORE TRUNCATE ON archive_in_progress
FOR EACH STATEMENT EXECUTE FUNCTION effectfence_refuse('effectfence: an archive''s deletion window closes only with the record of its segment');

-- Whether a certificate may leave the ledger in an open window: older than
-- its cutoff, its intent's result no longer replays, and no domain head or
-- unfinished attempt builds on it.
CREATE FUNCTION effectfence_certificate_archivable(hash text, intent text, committed_at bigint)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM archive_in_progress a WHERE $3 < a.before_ms)
     AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.intent = $2)
     AND NOT EXISTS (SELECT 1 FROM domains d WHERE d.head = $1)
     AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.state IN ('in_flight', 'unknown') AND i.parent = $1)
$$;

CREATE FUNCTION effectfence_certificates_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND effectfence_certificate_archivable(OLD.hash, OLD.intent, OLD.committed_at) THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'effectfence: certificates are immutable; only effectfence archive moves old ones out, into a segment it has written first';
END $$;
DROP TRIGGER certificates_immutable ON certificates;
CREATE TRIGGER certificates_immutable BEFORE UPDATE OR DELETE ON certificates
FOR EACH ROW EXECUTE FUNCTION effectfence_certificates_kept();

-- The foreign key from signatures makes the archive delete a signature
-- before its certificate: it goes only with a certificate that may go.
CREATE FUNCTION effectfence_signatures_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM certificates c WHERE c.hash = OLD.certificate
                                     AND effectfence_certificate_archivable(c.hash, c.intent, c.committed_at)) THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'effectfence: signatures are immutable; only effectfence archive moves one out, with its certificate';
END $$;
DROP TRIGGER signatures_immutable ON signatures;
CREATE TRIGGER signatures_immutable BEFORE UPDATE OR DELETE ON signatures
FOR EACH ROW EXECUTE FUNCTION effectfence_signatures_kept();

-- Events without an intent (swept, domain_evicted) stay: the ledger's
-- triggers and the fence read them.
CREATE FUNCTION effectfence_events_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND OLD.intent IS NOT NULL
     AND EXISTS (SELECT 1 FROM archive_in_progress a WHERE OLD.at < a.before_ms)
     AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.intent = OLD.intent) THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'effectfence: the event log is append-only; only effectfence archive moves old events out, into a segment it has written first';
END $$;
DROP TRIGGER events_append_only ON events;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION effectfence_events_kept();

CREATE FUNCTION effectfence_clears_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM archive_in_progress a WHERE OLD.requested_at < a.before_ms)
     AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.intent = OLD.intent) THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'effectfence: clears are an audit record and cannot be deleted; only effectfence archive moves old ones out, into a segment it has written first';
END $$;
DROP TRIGGER clears_append_only_delete ON clears;
CREATE TRIGGER clears_append_only_delete BEFORE DELETE ON clears
FOR EACH ROW EXECUTE FUNCTION effectfence_clears_kept();

-- An archive gathers an intent's clears with its other rows.
CREATE INDEX clears_by_intent ON clears(intent);

-- effectfence ledger on PostgreSQL, schema version 1: the same tables,
-- triggers and views as migrations/0001_initial.sql (SQLite).
-- Times are bigint milliseconds since the Unix epoch (UTC), taken from the
-- database server's clock; the views show them as text. JSON columns hold
-- RFC 8785 canonical JSON as text, so certificate hashes recompute exactly.

CREATE FUNCTION effectfence_now_ms() RETURNS bigint LANGUAGE sql STABLE
AS $$ SELECT (extract(epoch FROM now()) * 1000)::bigint $$;

CREATE FUNCTION effectfence_utc(ms bigint) RETURNS text LANGUAGE sql IMMUTABLE
AS $$ SELECT to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') $$;

-- One row per logical action; every change bumps version.
CREATE TABLE intents (
  intent           text PRIMARY KEY,
  state            text NOT NULL CHECK (state IN ('in_flight', 'done', 'failed', 'unknown', 'cleared')),
  domain           text NOT NULL,
  tool             text NOT NULL,
  args             text NOT NULL,
  payload_hash     text NOT NULL,             -- SHA-256 of canonical {"args":..,"tool":..}
  agent            text NOT NULL,
  seq              bigint NOT NULL,           -- domain sequence number reserved at admission
  generation       bigint NOT NULL,           -- +1 on every (re)admission
  token            text NOT NULL,             -- fence token of the current holder
  read_set         text NOT NULL DEFAULT '[]',
  parent           text,                      -- certificate this effect builds on
  known_clock      text NOT NULL DEFAULT '{}',
  holder_host      text NOT NULL,             -- pid liveness is judged on this host only
  holder_boot      text NOT NULL,
  holder_pid       bigint NOT NULL,
  holder_started   bigint NOT NULL,
  lease_expires_at bigint NOT NULL,           -- database clock
  admitted_at      bigint NOT NULL,
  updated_at       bigint NOT NULL,
  cert_hash        text,                      -- set when done
  reason           text,                      -- why failed / unknown / cleared
  version          bigint NOT NULL DEFAULT 1
);
CREATE INDEX intents_by_state ON intents(state, domain);

-- Contention scopes; seq is the version column read-sets are checked against.
CREATE TABLE domains (
  domain     text PRIMARY KEY,
  seq        bigint NOT NULL DEFAULT 0,
  clock      text NOT NULL DEFAULT '{}',
  head       text,
  head_seq   bigint NOT NULL DEFAULT 0,
  updated_at bigint NOT NULL
);

-- Immutable records of effects that ran. hash = SHA-256(body).
CREATE TABLE certificates (
  hash         text PRIMARY KEY,
  intent       text NOT NULL,
  domain       text NOT NULL,
  seq          bigint NOT NULL,
  generation   bigint NOT NULL,
  parent       text,
  agent        text NOT NULL,
  tool         text NOT NULL,
  body         text NOT NULL,
  committed_at bigint NOT NULL
);
CREATE UNIQUE INDEX certificates_domain_seq ON certificates(domain, seq);
CREATE INDEX certificates_by_intent ON certificates(intent);
CREATE INDEX certificates_by_time ON certificates(committed_at);

CREATE FUNCTION effectfence_refuse() RETURNS trigger LANGUAGE plpgsql
AS $$ BEGIN RAISE EXCEPTION '%', TG_ARGV[0]; END $$;

CREATE TRIGGER certificates_immutable BEFORE UPDATE OR DELETE ON certificates
FOR EACH ROW EXECUTE FUNCTION effectfence_refuse('effectfence: certificates are immutable');
CREATE TRIGGER certificates_immutable_truncate BEFORE TRUNCATE ON certificates
FOR EACH STATEMENT EXECUTE FUNCTION effectfence_refuse('effectfence: certificates are immutable');

-- Append-only audit log.
CREATE TABLE events (
  id         bigserial PRIMARY KEY,
  at         bigint NOT NULL,
  kind       text NOT NULL CHECK (kind IN ('admitted', 'takeover', 'committed', 'aborted',
                                           'commit_refused', 'holder_dead', 'fenced_on_exit',
                                           'cleared', 'swept', 'domain_evicted')),
  intent     text,
  domain     text,
  seq        bigint,
  generation bigint,
  actor      text NOT NULL,
  detail     text NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_intent ON events(intent);
CREATE INDEX events_by_time ON events(at);
CREATE INDEX events_evicted_domains ON events(domain) WHERE kind = 'domain_evicted';

CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION effectfence_refuse('effectfence: the event log is append-only');
CREATE TRIGGER events_append_only_truncate BEFORE TRUNCATE ON events
FOR EACH STATEMENT EXECUTE FUNCTION effectfence_refuse('effectfence: the event log is append-only');

-- Ledger-wide counters.
CREATE TABLE counters (
  name  text PRIMARY KEY,
  value bigint NOT NULL DEFAULT 0
);
INSERT INTO counters(name) VALUES
  ('admitted'), ('replayed'), ('refused_stale_read_set'), ('refused_domain_race'),
  ('refused_in_flight'), ('refused_prior_failure'), ('refused_payload_mismatch'),
  ('committed'), ('aborted');

-- Operator clears, one INSERT by the CLI or by hand:
--   INSERT INTO clears(intent, operator, reason)
--     VALUES ('charge:order-123', 'alice', 'provider shows no charge');
CREATE TABLE clears (
  id             bigserial PRIMARY KEY,
  intent         text NOT NULL,
  operator       text NOT NULL CHECK (length(operator) > 0),
  reason         text NOT NULL CHECK (length(reason) > 0),
  requested_at   bigint NOT NULL DEFAULT effectfence_now_ms(),
  previous_state text
);

CREATE FUNCTION effectfence_clears_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE current_state text;
BEGIN
  SELECT state INTO current_state FROM intents WHERE intent = NEW.intent FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'effectfence: cannot clear: no such intent';
  END IF;
  IF current_state NOT IN ('failed', 'unknown') THEN
    RAISE EXCEPTION 'effectfence: cannot clear: only failed or unknown intents can be cleared (done results and in-flight attempts cannot)';
  END IF;
  NEW.previous_state := current_state;
  RETURN NEW;
END $$;
CREATE TRIGGER clears_check BEFORE INSERT ON clears
FOR EACH ROW EXECUTE FUNCTION effectfence_clears_check();

CREATE FUNCTION effectfence_clears_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO events(at, kind, intent, domain, seq, generation, actor, detail)
  SELECT NEW.requested_at, 'cleared', i.intent, i.domain, i.seq, i.generation, NEW.operator,
         json_build_object('reason', NEW.reason, 'previous_state', i.state, 'previous_reason', i.reason)::text
    FROM intents i WHERE i.intent = NEW.intent;
  UPDATE intents
     SET state = 'cleared', reason = NEW.reason, updated_at = NEW.requested_at, version = version + 1
   WHERE intent = NEW.intent;
  RETURN NULL;
END $$;
CREATE TRIGGER clears_apply AFTER INSERT ON clears
FOR EACH ROW EXECUTE FUNCTION effectfence_clears_apply();

CREATE TRIGGER clears_append_only_update BEFORE UPDATE ON clears
FOR EACH ROW EXECUTE FUNCTION effectfence_refuse('effectfence: clears are an audit record and cannot be changed');
CREATE TRIGGER clears_append_only_delete BEFORE DELETE ON clears
FOR EACH ROW EXECUTE FUNCTION effectfence_refuse('effectfence: clears are an audit record and cannot be deleted');
CREATE TRIGGER clears_append_only_truncate BEFORE TRUNCATE ON clears
FOR EACH STATEMENT EXECUTE FUNCTION effectfence_refuse('effectfence: clears are an audit record and cannot be deleted');

-- Views for people at the psql prompt, named as in the SQLite ledger.
CREATE VIEW fenced AS
SELECT intent, state, tool, args, domain, agent, reason, effectfence_utc(updated_at) AS since, generation
  FROM intents WHERE state IN ('failed', 'unknown')
 ORDER BY updated_at;

CREATE VIEW in_flight AS
SELECT intent, tool, domain, agent, generation,
       holder_host || ':' || holder_pid AS holder,
       effectfence_utc(admitted_at) AS admitted,
       effectfence_utc(lease_expires_at) AS lease_expires
  FROM intents WHERE state = 'in_flight'
 ORDER BY admitted_at;

CREATE VIEW recent_effects AS
SELECT effectfence_utc(committed_at) AS committed,
       intent, tool, domain, seq, agent,
       (body::json -> 'args')::text AS args,
       (body::json -> 'result')::text AS result,
       hash AS certificate, parent
  FROM certificates
 ORDER BY committed_at DESC;

CREATE VIEW domain_sequences AS
SELECT domain, seq, head AS latest_certificate,
       (SELECT count(*) FROM intents i WHERE i.domain = d.domain AND i.state = 'in_flight') AS in_flight,
       effectfence_utc(updated_at) AS updated
  FROM domains d ORDER BY domain;

CREATE VIEW recent_events AS
SELECT id, effectfence_utc(at) AS at_utc, kind, intent, domain, seq, generation, actor, detail
  FROM events ORDER BY id DESC;

CREATE VIEW stats AS
SELECT
  (SELECT value FROM counters WHERE name = 'admitted') AS admitted,
  (SELECT value FROM counters WHERE name = 'replayed') AS replayed,
  (SELECT sum(value) FROM counters WHERE name LIKE 'refused_%') AS refused,
  (SELECT value FROM counters WHERE name = 'refused_stale_read_set') AS refused_stale_read_set,
  (SELECT value FROM counters WHERE name = 'refused_domain_race') AS refused_domain_race,
  (SELECT value FROM counters WHERE name = 'refused_in_flight') AS refused_in_flight,
  (SELECT value FROM counters WHERE name = 'refused_prior_failure') AS refused_prior_failure,
  (SELECT value FROM counters WHERE name = 'refused_payload_mismatch') AS refused_payload_mismatch,
  (SELECT sum(value) FROM counters WHERE name = 'replayed' OR name LIKE 'refused_%') AS prevented,
  (SELECT value FROM counters WHERE name = 'committed') AS committed,
  (SELECT value FROM counters WHERE name = 'aborted') AS aborted;

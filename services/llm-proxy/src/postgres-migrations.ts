// The PostgreSQL store's schema, as migrations run at start-up under an
// advisory lock (@oz0/postgres runMigrations). Budgets are rows here: an
// account is locked for each decision by the functions reserve_budget and
// settle_budget, one round trip each.
import type { Migration } from "@oz0/postgres";

const METERING_COLUMN_TYPES = `operation_id text NOT NULL, job text NOT NULL, agent text NOT NULL, session text NOT NULL,
  provider text NOT NULL, model text NOT NULL, wire text NOT NULL, stream boolean NOT NULL, status integer NOT NULL,
  outcome text NOT NULL, input_tokens bigint NOT NULL, output_tokens bigint NOT NULL, cache_read_tokens bigint NOT NULL,
  cache_write_tokens bigint NOT NULL, reasoning_tokens bigint NOT NULL, cost_usd double precision NOT NULL,
  latency_ms double precision NOT NULL, ttft_ms double precision, estimated boolean NOT NULL, started_at timestamptz NOT NULL`;

/** Append only: never edit one that has been applied somewhere. */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "secrets, session tokens, metering, budgets",
    sql: `
CREATE TABLE secrets (name text PRIMARY KEY, iv bytea NOT NULL, ciphertext bytea NOT NULL, tag bytea NOT NULL,
  created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL);
CREATE TABLE session_tokens (hash text PRIMARY KEY, job text NOT NULL, agent text NOT NULL, session text NOT NULL,
  budget_usd double precision NOT NULL, created_at timestamptz NOT NULL, revoked_at timestamptz);
CREATE INDEX session_tokens_by_session ON session_tokens (session);
CREATE TABLE attempts (${METERING_COLUMN_TYPES}, attempt integer NOT NULL, PRIMARY KEY (operation_id, attempt));
CREATE INDEX attempts_by_job ON attempts (job);
CREATE TABLE calls (${METERING_COLUMN_TYPES}, attempts integer NOT NULL, PRIMARY KEY (operation_id));
CREATE INDEX calls_by_job ON calls (job);
CREATE INDEX calls_by_session ON calls (session);
CREATE TABLE budget_accounts (session text PRIMARY KEY, limit_usd numeric NOT NULL, spent_usd numeric NOT NULL,
  reserved_usd numeric NOT NULL);
-- state: held (counted in reserved_usd), settled, or expired (freed by the sweep; a late settle still counts its spend).
CREATE TABLE budget_reservations (id text PRIMARY KEY, session text NOT NULL, amount_usd numeric NOT NULL, state text NOT NULL,
  actual_usd numeric, created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL);
CREATE INDEX budget_reservations_held ON budget_reservations (expires_at) WHERE state = 'held';
`,
  },
  {
    version: 2,
    name: "budget reservations in one round trip",
    // Each function is one transaction's worth of locking: the account row is
    // locked from the decision to the hold. A settled reservation is deleted
    // (a second settle finds nothing); only holds in flight and expired ones stay.
    // search_path is fixed at creation, so the functions find this schema's tables.
    sql: `
CREATE INDEX budget_reservations_by_session ON budget_reservations (session);
CREATE FUNCTION reserve_budget(p_id text, p_session text, p_limit numeric, p_worst numeric, p_minimum numeric, p_partial boolean, p_hold_ms double precision)
RETURNS TABLE (o_amount numeric, o_limit numeric, o_spent numeric, o_reserved numeric)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
  a budget_accounts%ROWTYPE;
  available numeric;
  amount numeric;
BEGIN
  SELECT * INTO a FROM budget_accounts WHERE session = p_session FOR UPDATE;
  IF NOT FOUND THEN
    -- A first reservation starts from what the session's calls were charged (a restart, a forgotten account).
    INSERT INTO budget_accounts (session, limit_usd, spent_usd, reserved_usd)
      SELECT p_session, p_limit, COALESCE(SUM(c.cost_usd), 0)::numeric, 0 FROM calls c WHERE c.session = p_session
      ON CONFLICT (session) DO NOTHING;
    SELECT * INTO a FROM budget_accounts WHERE session = p_session FOR UPDATE;
  END IF;
  available := a.limit_usd - a.spent_usd - a.reserved_usd;
  IF available <= 0 OR available < p_minimum OR (NOT p_partial AND p_worst > available) THEN
    RETURN QUERY SELECT NULL::numeric, a.limit_usd, a.spent_usd, a.reserved_usd;
    RETURN;
  END IF;
  amount := LEAST(p_worst, available);
  UPDATE budget_accounts SET reserved_usd = reserved_usd + amount WHERE session = p_session;
  INSERT INTO budget_reservations (id, session, amount_usd, state, created_at, expires_at)
    VALUES (p_id, p_session, amount, 'held', now(), now() + p_hold_ms * interval '1 millisecond');
  RETURN QUERY SELECT amount, a.limit_usd, a.spent_usd, a.reserved_usd + amount;
END
$fn$;
CREATE FUNCTION settle_budget(p_id text, p_actual numeric) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
  r budget_reservations%ROWTYPE;
BEGIN
  DELETE FROM budget_reservations WHERE id = p_id RETURNING * INTO r;
  IF NOT FOUND OR r.state = 'settled' THEN RETURN; END IF;
  -- An expired hold was already given back by the sweep: only the spend is left to count.
  UPDATE budget_accounts
    SET reserved_usd = reserved_usd - CASE WHEN r.state = 'held' THEN r.amount_usd ELSE 0 END, spent_usd = spent_usd + p_actual
    WHERE session = r.session;
END
$fn$;
DELETE FROM budget_reservations WHERE state = 'settled';
`,
  },
  {
    version: 3,
    name: "a session token's first use",
    // Nothing recorded the use of the tokens already there: count them used, which claims nothing false.
    sql: "ALTER TABLE session_tokens ADD COLUMN used_at timestamptz; UPDATE session_tokens SET used_at = created_at;",
  },
  {
    version: 4,
    name: "calls in flight, reconciled as interrupted when their replica is gone",
    // One row per call in flight, written before its first attempt is sent and deleted with the
    // call's record. Its replica renews expires_at with its budget holds; once it lapses the
    // replica is gone, and any replica turns the row into an interrupted call.
    sql: `
CREATE TABLE pending_calls (operation_id text PRIMARY KEY, job text NOT NULL, agent text NOT NULL, session text NOT NULL,
  provider text NOT NULL, model text NOT NULL, wire text NOT NULL, stream boolean NOT NULL, attempt integer NOT NULL,
  started_at timestamptz NOT NULL, attempt_started_at timestamptz NOT NULL, reservation_id text, expires_at timestamptz NOT NULL);
CREATE INDEX pending_calls_by_expiry ON pending_calls (expires_at);
`,
  },
];

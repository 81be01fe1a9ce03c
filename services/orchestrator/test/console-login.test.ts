// One-time console login codes and the sessions they open, on a clock the
// test moves: a code works once and only until it expires, a session ends on
// its own, and only people can log in; with a sessions file, a session
// outlives a restart.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { credentialDigest, type Principal } from "@oz0/serving";
import { ConsoleLogin } from "../src/console/console-login.js";

const alice: Principal = {
  kind: "person",
  id: "alice",
  groups: ["approvers"],
  roles: new Set(["approver", "viewer"]),
  via: "oidc",
};

void test("a code opens one session as its maker, with the maker's roles, once", () => {
  const login = new ConsoleLogin();
  const { code } = login.createCode(alice);
  const session = login.redeem(code);
  assert.ok(session);
  assert.equal(login.redeem(code), undefined, "a second redemption");
  const principal = login.principalOf(credentialDigest(session.token));
  assert.deepEqual(principal, { ...alice, via: "console" });
  assert.equal(login.principalOf(credentialDigest(code)), undefined, "the code itself is no credential");
});

void test("a code expires unused, a session expires, and logging out ends a session at once", () => {
  let now = 1_000_000;
  const login = new ConsoleLogin({ codeTtlMs: 1_000, sessionTtlMs: 10_000, now: () => now });
  const late = login.createCode(alice).code;
  now += 1_000;
  assert.equal(login.redeem(late), undefined);
  const session = login.redeem(login.createCode(alice).code)!;
  const digest = credentialDigest(session.token);
  now += 9_999;
  assert.ok(login.principalOf(digest));
  now += 1;
  assert.equal(login.principalOf(digest), undefined);
  const other = login.redeem(login.createCode(alice).code)!;
  assert.equal(login.logout(credentialDigest(other.token)), true);
  assert.equal(login.principalOf(credentialDigest(other.token)), undefined);
});

void test("only a person logs in, and unredeemed codes are bounded (the oldest goes first)", () => {
  const login = new ConsoleLogin({ limit: 2 });
  assert.throws(() => login.createCode({ kind: "service", id: "sandbox" }), /only a person/);
  const first = login.createCode(alice).code;
  login.createCode(alice);
  login.createCode(alice);
  assert.equal(login.redeem(first), undefined);
});

void test("with a sessions file, a session outlives its ConsoleLogin (a restart); the file holds digests only; logging out and expiry end it there too", (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-console-sessions-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, "console-sessions.json");
  let now = 1_000_000;
  const before = new ConsoleLogin({ sessionsFile: file, sessionTtlMs: 10_000, now: () => now });
  const kept = before.redeem(before.createCode(alice).code)!;
  const ended = before.redeem(before.createCode(alice).code)!;
  const code = before.createCode(alice).code;
  before.logout(credentialDigest(ended.token));
  const stored = readFileSync(file, "utf8");
  assert.ok(!stored.includes(kept.token), "no token in the file");
  assert.equal(statSync(file).mode & 0o777, 0o600);

  const after = new ConsoleLogin({ sessionsFile: file, sessionTtlMs: 10_000, now: () => now });
  assert.deepEqual(after.principalOf(credentialDigest(kept.token)), { ...alice, via: "console" });
  assert.equal(after.principalOf(credentialDigest(ended.token)), undefined, "a session logged out stays ended");
  assert.equal(after.redeem(code), undefined, "codes do not outlive the process");
  now += 10_000;
  assert.equal(
    new ConsoleLogin({ sessionsFile: file, now: () => now }).principalOf(credentialDigest(kept.token)),
    undefined,
    "an ended session is not read back",
  );
});

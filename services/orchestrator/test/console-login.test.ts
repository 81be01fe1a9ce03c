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
import { loginService } from "../src/rpc/login-service.js";

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
  const principal = login.sessionOf(credentialDigest(session.token))?.principal;
  assert.deepEqual(principal, { ...alice, via: "console" });
  assert.equal(login.sessionOf(credentialDigest(code))?.principal, undefined, "the code itself is no credential");
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
  assert.ok(login.sessionOf(digest));
  now += 1;
  assert.equal(login.sessionOf(digest), undefined);
  const other = login.redeem(login.createCode(alice).code)!;
  assert.equal(login.logout(credentialDigest(other.token)), true);
  assert.equal(login.sessionOf(credentialDigest(other.token))?.principal, undefined);
});

void test("a code made with an OIDC token opens a session that ends when the token does, not 12 hours later", () => {
  let now = 1_000_000;
  const login = new ConsoleLogin({ codeTtlMs: 300_000, sessionTtlMs: 12 * 3_600_000, now: () => now });
  const token = { ...alice, credentialEnds: now + 60_000 };
  const session = login.redeem(login.createCode(token).code)!;
  assert.equal(session.expiresAt.getTime(), now + 60_000);
  now += 59_999;
  assert.ok(login.sessionOf(credentialDigest(session.token)));
  now += 1;
  assert.equal(login.sessionOf(credentialDigest(session.token)), undefined, "gone with the token");
  // A code outlives its token no more than a session does.
  const late = login.createCode({ ...alice, credentialEnds: now + 10 }).code;
  now += 10;
  assert.equal(login.redeem(late), undefined);
});

void test("a console session makes no login code: a session it opened would outlive it, and so on for ever", () => {
  const login = new ConsoleLogin();
  const session = login.redeem(login.createCode(alice).code)!;
  assert.equal(session.principal.via, "console");
  assert.throws(() => login.createCode(session.principal), /a console session cannot make a login code/);
  assert.equal(login.sessionOf(credentialDigest(session.token))?.origin, "oidc", "how alice had logged in is kept");
});

void test("one person's codes and sessions are bounded on their own: a viewer minting a thousand pushes nobody else out", () => {
  const login = new ConsoleLogin({ limit: 100, perPerson: 3 });
  const owner: Principal = { kind: "person", id: "owner", groups: [], roles: new Set(["admin"]), via: "owner" };
  const vic: Principal = { kind: "person", id: "vic", groups: [], roles: new Set(["viewer"]), via: "token" };
  const ownerSession = login.redeem(login.createCode(owner).code)!;
  const ownerCode = login.createCode(owner).code;
  const vics = Array.from({ length: 1_000 }, () => login.redeem(login.createCode(vic).code)!);
  assert.ok(login.sessionOf(credentialDigest(ownerSession.token)), "the owner's session stays");
  assert.ok(login.redeem(ownerCode), "the owner's unredeemed code stays");
  assert.equal(
    vics.filter((v) => login.sessionOf(credentialDigest(v.token)) !== undefined).length,
    3,
    "vic keeps their latest three",
  );
  assert.ok(login.sessionOf(credentialDigest(vics.at(-1)!.token)));
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
  assert.deepEqual(after.sessionOf(credentialDigest(kept.token))?.principal, { ...alice, via: "console" });
  assert.equal(
    after.sessionOf(credentialDigest(ended.token))?.principal,
    undefined,
    "a session logged out stays ended",
  );
  assert.equal(after.redeem(code), undefined, "codes do not outlive the process");
  now += 10_000;
  assert.equal(
    new ConsoleLogin({ sessionsFile: file, now: () => now }).sessionOf(credentialDigest(kept.token)),
    undefined,
    "an ended session is not read back",
  );
});

void test("logging out an OIDC token refuses it until it expires, across a restart; the owner's and a configured token stay", (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-console-logged-out-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, "console-sessions.json");
  let now = 1_000_000;
  const login = new ConsoleLogin({ sessionsFile: file, now: () => now });
  const idToken = credentialDigest("ada's ID token");
  assert.equal(login.logout(idToken, { ...alice, credentialEnds: now + 60_000 }), true);
  assert.equal(login.loggedOut(idToken), true);
  const restarted = new ConsoleLogin({ sessionsFile: file, now: () => now });
  assert.equal(restarted.loggedOut(idToken), true, "a restart does not take it back");
  now += 60_000;
  assert.equal(
    restarted.loggedOut(idToken),
    false,
    "expired: the issuer's check refuses it anyway, and it is forgotten",
  );

  const owner: Principal = { kind: "person", id: "owner", groups: [], roles: new Set(["admin"]), via: "owner" };
  assert.equal(login.logout(credentialDigest("owner-token"), owner), false);
  assert.equal(login.loggedOut(credentialDigest("owner-token")), false, "the owner credential is not ended by a page");
  const vic: Principal = { kind: "person", id: "vic", groups: [], roles: new Set(["viewer"]), via: "token" };
  assert.equal(login.logout(credentialDigest("vic-token"), vic), false);
  assert.equal(login.loggedOut(credentialDigest("vic-token")), false);
});

void test("a link that cannot be redeemed points to `oz0 console`, the command that makes a new one", () => {
  const registration = loginService({ redeem: () => undefined } as unknown as ConsoleLogin) as unknown as {
    impl: { redeemLoginCode(request: { code: string }): unknown };
  };
  assert.throws(
    () => registration.impl.redeemLoginCode({ code: "used-once" }),
    (error: Error) => /run `oz0 console` for a new one/.test(error.message) && !/oz0 dev/.test(error.message),
  );
});

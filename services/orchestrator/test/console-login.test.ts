// One-time console login codes and the sessions they open, on a clock the
// test moves: a code works once and only until it expires, a session ends on
// its own, and only people can log in.
import assert from "node:assert/strict";
import { test } from "node:test";
import { credentialDigest, type Principal } from "@oz0/serving";
import { ConsoleLogin } from "../src/console/console-login.js";

const alice: Principal = { kind: "person", id: "alice", groups: ["approvers"], roles: new Set(["approver", "viewer"]), via: "oidc" };

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

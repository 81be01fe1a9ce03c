// The readers services build their configFromEnv(env) on: unset and empty
// read as undefined, a well-formed value as itself, and anything else is
// refused with an error that names the variable, the form it expects and
// what it got.
import assert from "node:assert/strict";
import { test } from "node:test";
import { EnvConfigError, envInteger, envOneOf, envPort, envString, envUrl, envUrlList } from "../src/env-config.js";

function refused(read: () => unknown, variable: string, message: RegExp): void {
  assert.throws(read, (error: unknown) => {
    assert.ok(error instanceof EnvConfigError, String(error));
    assert.equal(error.variable, variable);
    assert.match(error.message, message);
    return true;
  });
}

void test("unset and empty read as undefined", () => {
  for (const env of [{}, { X: "" }, { X: "  " }]) {
    assert.equal(envString(env, "X"), undefined);
    assert.equal(envInteger(env, "X"), undefined);
    assert.equal(envPort(env, "X"), undefined);
    assert.equal(envUrl(env, "X"), undefined);
    assert.deepEqual(envUrlList(env, "X"), []);
    assert.equal(envOneOf(env, "X", ["a", "b"]), undefined);
  }
});

void test("a port is 0 to 65535; anything else is refused naming the variable", () => {
  assert.equal(envPort({ OZ0_PORT: "7700" }, "OZ0_PORT"), 7700);
  assert.equal(envPort({ OZ0_PORT: "0" }, "OZ0_PORT"), 0);
  for (const bad of ["x", "77x", "-1", "65536", "7700.5", "1e3"]) {
    refused(
      () => envPort({ OZ0_PORT: bad }, "OZ0_PORT"),
      "OZ0_PORT",
      new RegExp(
        `^OZ0_PORT must be a port number from 0 \\(any free port\\) to 65535; got "${bad.replace(".", "\\.")}"$`,
      ),
    );
  }
});

void test("a whole number within its bounds, its unit in the message", () => {
  assert.equal(envInteger({ T: "1500" }, "T", { min: 100, unit: "milliseconds" }), 1500);
  refused(
    () => envInteger({ T: "99" }, "T", { min: 100, unit: "milliseconds" }),
    "T",
    /^T must be a whole number of milliseconds, at least 100; got "99"$/,
  );
  refused(() => envInteger({ T: "1.5" }, "T"), "T", /whole number, at least 0; got "1\.5"/);
  refused(() => envInteger({ T: "ten" }, "T"), "T", /got "ten"/);
  refused(() => envInteger({ T: "11" }, "T", { max: 10 }), "T", /from 0 to 10; got "11"/);
});

void test("URLs are http or https, alone or comma-separated", () => {
  assert.equal(envUrl({ U: "http://127.0.0.1:7701" }, "U"), "http://127.0.0.1:7701");
  assert.deepEqual(envUrlList({ U: "http://a:1, https://b:2 ," }, "U"), ["http://a:1", "https://b:2"]);
  refused(() => envUrl({ U: "127.0.0.1:7701" }, "U"), "U", /^U must be an http:\/\/ or https:\/\/ URL/);
  refused(
    () => envUrlList({ U: "http://a:1,nowhere" }, "U"),
    "U",
    /comma-separated http:\/\/ or https:\/\/ URLs; got "http:\/\/a:1,nowhere"/,
  );
});

void test("one of a closed set", () => {
  assert.equal(envOneOf({ M: "bwrap" }, "M", ["auto", "bwrap"]), "bwrap");
  refused(() => envOneOf({ M: "docker" }, "M", ["auto", "bwrap"]), "M", /^M must be one of auto, bwrap; got "docker"$/);
});

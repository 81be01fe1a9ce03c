// The readers services build their configFromEnv(env) on: unset and empty
// read as undefined, a well-formed value as itself, and anything else is
// refused with an error that names the variable, the form it expects and
// what it got.
import assert from "node:assert/strict";
import { test } from "node:test";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import {
  EnvConfigError,
  envInteger,
  envNumber,
  envOneOf,
  envPort,
  envString,
  envUrl,
  envUrlList,
} from "../src/env-config.js";

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
    assert.equal(envNumber(env, "X"), undefined);
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
  // What Kubernetes leaves of a Service's address the pod was not given.
  refused(
    () => envUrl({ U: "http://$(EVENTS_SERVICE_HOST):7703" }, "U"),
    "U",
    /with every \$\(VAR\) filled in .* restart the pod\); got "http:\/\/\$\(EVENTS_SERVICE_HOST\):7703"$/,
  );
  refused(
    () => envUrlList({ U: "http://a:1,http://$(ORCHESTRATOR_SERVICE_HOST):7710" }, "U"),
    "U",
    /with every \$\(VAR\) filled in/,
  );
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

void test("a decimal number at least its minimum, its unit in the message", () => {
  assert.equal(envNumber({ H: "168" }, "H", { unit: "hours" }), 168);
  assert.equal(envNumber({ H: "0.5" }, "H", { unit: "hours" }), 0.5);
  assert.equal(envNumber({ H: "0" }, "H", { unit: "hours" }), 0);
  for (const bad of ["-1", "1e3", "a week", "0x10", "Infinity", "."])
    refused(
      () => envNumber({ H: bad }, "H", { unit: "hours" }),
      "H",
      new RegExp(`^H must be a number of hours, at least 0; got "${bad.replace(".", "\\.")}"$`),
    );
});

void test("configFromEnvOrExit prints a malformed variable's message after the program's name and exits 2", () => {
  const module = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "src", "env-config.ts");
  const script = `
    import { configFromEnvOrExit, envPort } from ${JSON.stringify(module)};
    const port = configFromEnvOrExit("oz0-example", () => envPort(process.env, "OZ0_PORT"));
    console.log("started on", port);
  `;
  const run = (port: string) =>
    spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      env: { ...process.env, OZ0_PORT: port },
      encoding: "utf8",
    });
  const bad = run("x");
  assert.equal(bad.status, 2, bad.stderr);
  assert.equal(bad.stderr, 'oz0-example: OZ0_PORT must be a port number from 0 (any free port) to 65535; got "x"\n');
  assert.equal(bad.stdout, "");
  const good = run("7703");
  assert.equal(good.status, 0, good.stderr);
  assert.equal(good.stdout, "started on 7703\n");
});

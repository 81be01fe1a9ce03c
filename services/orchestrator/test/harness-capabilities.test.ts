// A harness's start against its manifest's promise (policy/harness-capabilities.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import { capabilitiesViolation } from "../src/policy/harness-capabilities.js";

const started = (permissions: boolean | undefined, harnessName = "mine") => ({
  harnessName,
  capabilities:
    permissions === undefined
      ? undefined
      : {
          $typeName: "oz0.harness.v1.Capabilities" as const,
          permissions,
          runtimeTools: false,
          structuredOutput: false,
          streamingText: false,
        },
});

void test("a manifest saying permissions: true needs a start that declares them", () => {
  assert.match(
    capabilitiesViolation({ name: "h", permissions: true }, started(false)) ?? "",
    /^harness h \(it names itself mine\) does not declare the permissions capability in its started event/,
  );
  assert.match(
    capabilitiesViolation({ name: "h", permissions: true }, started(undefined, "")) ?? "",
    /^harness h does not declare/,
    "no capabilities at all; a harness that names nothing is not quoted",
  );
  assert.equal(capabilitiesViolation({ name: "h", permissions: true }, started(true)), undefined);
  assert.equal(capabilitiesViolation({ name: "h" }, started(false)), undefined, "a manifest that promises nothing");
  assert.equal(capabilitiesViolation({ name: "h", permissions: false }, started(true)), undefined);
});

// An orchestrator that would send sandboxes its own credential says so at start: each RunSession carries what
// it sends into a sandbox's memory, beside agent code, and the LLM proxy's control API and events accept
// OZ0_SERVICE_TOKEN too (second review of the credential split: the fallback was silent).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { newCredential } from "@oz0/serving";
import { capturingLogger } from "@oz0/serving/testing";
import { startOrchestrator } from "../src/start-orchestrator.js";

async function startupWarnings(audienceTokens?: { sandbox: string }): Promise<string[]> {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-credential-"));
  const { lines, logger } = capturingLogger();
  const orchestrator = await startOrchestrator({
    home,
    port: 0,
    sandboxUrls: ["http://127.0.0.1:1"],
    llmProxyUrl: "http://127.0.0.1:1",
    auth: { serviceToken: newCredential(), ...(audienceTokens ? { audienceTokens } : {}) },
    logger,
  });
  try {
    return lines.map((l) => l.msg ?? "");
  } finally {
    await orchestrator.close();
    rmSync(home, { recursive: true, force: true });
  }
}

void test("warns at start when sandboxes would be sent OZ0_SERVICE_TOKEN, and not when they have their own", async () => {
  const without = await startupWarnings();
  assert.equal(
    without.filter((m) => m.startsWith("OZ0_SERVICE_TOKEN_FOR_SANDBOX is unset")).length,
    1,
    without.join("\n"),
  );
  const withOwn = await startupWarnings({ sandbox: newCredential() });
  assert.equal(withOwn.filter((m) => m.startsWith("OZ0_SERVICE_TOKEN_FOR_SANDBOX is unset")).length, 0);
});

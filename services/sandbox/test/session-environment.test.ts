import assert from "node:assert/strict";
import { it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { buildSessionEnvironment } from "@oz0/harness/host";

void it("builds the environment from the request alone, never from the sandbox's own", () => {
  process.env.OPENAI_API_KEY = "sk-node-key-must-not-leak";
  try {
    const env = buildSessionEnvironment({
      request: create(SessionRequestSchema, {
        sessionId: "s",
        jobId: "j",
        llm: { openaiBaseUrl: "http://proxy/v1", token: "tok", headers: { "Oz0-Job": "j" } },
      }),
      workingDir: "/w",
      stateDir: "/s",
      pluginDir: "/p",
      path: "/usr/bin:/bin",
      locale: "C.UTF-8",
      anthropicBaseUrl: "",
      openaiBaseUrl: "http://proxy/v1",
    });
    assert.equal(env.OPENAI_API_KEY, "tok");
    assert.equal(env.OPENAI_BASE_URL, "http://proxy/v1");
    assert.equal(env.ANTHROPIC_BASE_URL, undefined);
    assert.equal(env.HOME, "/s/home");
    assert.equal(env.TMPDIR, "/s/tmp");
    assert.equal(env.OZ0_LLM_HEADERS, '{"Oz0-Job":"j"}');
    assert.equal(env.PATH, "/usr/bin:/bin");
    assert(!Object.values(env).includes("sk-node-key-must-not-leak"));
  } finally {
    delete process.env.OPENAI_API_KEY;
  }
});

void it("sets no LLM variables for a request without an endpoint", () => {
  const env = buildSessionEnvironment({
    request: create(SessionRequestSchema, { sessionId: "s" }),
    workingDir: "/w",
    stateDir: "/s",
    pluginDir: "",
    path: "/bin",
    locale: "C.UTF-8",
    anthropicBaseUrl: "",
    openaiBaseUrl: "",
  });
  assert.deepEqual(
    Object.keys(env).filter((name) => /API_KEY|BASE_URL|LLM|TRACE/.test(name)),
    [],
  );
});

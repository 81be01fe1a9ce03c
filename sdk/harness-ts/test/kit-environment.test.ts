// The kit gives a harness the environment the real stack gives it, and talks
// to it on the LLM proxy's routes: a harness that passes the kit meets the
// same variables and URLs in production.
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { fromJsonString } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { defaultSessionPath, runConformance, sessionEnvironment, startScriptedModel } from "@oz0/harness/testing";

const here = (relative: string): string => fileURLToPath(new URL(relative, import.meta.url));
const repoRoot = here("../../../");

void describe("the kit's session environment", () => {
  void it("is the sandbox's, variable for variable, with the session token as the provider keys", async () => {
    const report = await runConformance({
      command: [process.execPath, here("./fixtures/env-echo.mjs")],
      only: ["handshake"],
      transcripts: true,
      graceMs: 5000,
      pluginDir: here("./fixtures"),
    });
    assert.equal(report.ok, true, JSON.stringify(report.cases));
    const lines = report.cases[0]?.transcripts?.[0]?.lines ?? [];
    const request = fromJsonString(SessionRequestSchema, lines[0]?.line ?? "", { ignoreUnknownFields: true });
    const resultLine = JSON.parse(lines.at(-1)?.line ?? "{}") as { result: { text: string } };
    const env = JSON.parse(resultLine.result.text) as Record<string, string>;

    const { buildSessionEnvironment } = await import("@oz0/sandbox");
    const stack = buildSessionEnvironment({
      request,
      workingDir: request.workingDir,
      stateDir: request.stateDir,
      pluginDir: here("./fixtures"),
      path: defaultSessionPath(),
      locale: "C.UTF-8",
      anthropicBaseUrl: request.llm?.anthropicBaseUrl ?? "",
      openaiBaseUrl: request.llm?.openaiBaseUrl ?? "",
    });
    // Whatever the shell adds to a process it starts (PWD, SHLVL, _) is not the stack's.
    const { PWD: _pwd, SHLVL: _shlvl, _: _underscore, ...seen } = env;
    assert.deepEqual(seen, stack);
    assert.deepEqual(sessionEnvironment({ request, pluginDir: here("./fixtures") }), stack);

    const token = request.llm?.token ?? "";
    assert.match(token, /^oz0st_/);
    assert.equal(env.ANTHROPIC_API_KEY, token);
    assert.equal(env.OPENAI_API_KEY, token);
    assert.equal(env.OZ0_LLM_TOKEN, token);
    assert.equal(env.OZ0_SESSION_ID, request.sessionId);
    assert.equal(env.HOME, path.join(request.stateDir, "home"));
    assert.equal(env.TMPDIR, path.join(request.stateDir, "tmp"));
    assert.equal(env.ANTHROPIC_BASE_URL, request.llm?.anthropicBaseUrl);
    assert.match(env.ANTHROPIC_BASE_URL ?? "", /^http:\/\/127\.0\.0\.1:\d+\/anthropic$/);
    assert.match(env.OPENAI_BASE_URL ?? "", /^http:\/\/127\.0\.0\.1:\d+\/openai\/v1$/);
    assert.deepEqual(JSON.parse(env.OZ0_LLM_HEADERS ?? "{}"), {
      "Oz0-Agent": "conformance-agent@3",
      "Oz0-Job": "job-conformance-handshake",
    });
  });
});

void describe("the scripted model as the LLM proxy", () => {
  const samples = [
    ["POST", "/anthropic/v1/messages"],
    ["POST", "/anthropic/messages"],
    ["POST", "/anthropic/v1/messages/count_tokens"],
    ["POST", "/openai/v1/chat/completions"],
    ["POST", "/openai/chat/completions"],
    ["POST", "/openai/v1/chat/completions/"],
    ["POST", "/openai/v1/v1/chat/completions"],
    ["POST", "/openai/v1/responses"],
    ["POST", "/openai/responses/"],
    ["POST", "/v1/messages"],
    ["POST", "/v1/chat/completions"],
    ["POST", "/anthropic/v2/messages"],
    ["POST", "/Anthropic/v1/messages"],
    ["GET", "/anthropic/v1/models"],
    ["GET", "/anthropic/v1/messages"],
  ] as const;

  void it("answers exactly the routes services/llm-proxy serves, and 404s the rest as the proxy does", async () => {
    // The proxy's own path pattern and its wire formats' routes, read from its source, decide what must be served.
    const formats = path.join(repoRoot, "services", "llm-proxy", "src", "wire-formats");
    const literal = /const PATH = (\/\^.*\$\/);/.exec(await readFile(path.join(formats, "formats.ts"), "utf8"))?.[1];
    assert.ok(literal, "the path pattern of services/llm-proxy/src/wire-formats/formats.ts was not found");
    const routes = new Set<string>();
    for (const file of await readdir(formats))
      for (const found of (await readFile(path.join(formats, file), "utf8")).matchAll(/^ {2}route: "([^"]+)",$/gm))
        routes.add(found[1]!);
    assert.ok(
      routes.has("messages") && routes.has("chat/completions"),
      `the routes of the proxy's wire formats: ${[...routes].join(", ")}`,
    );
    const pathPattern = new RegExp(literal.slice(1, -1));
    const proxyRoute = {
      exec(route: string): RegExpExecArray | null {
        const match = pathPattern.exec(route);
        return match !== null && routes.has(match[2]!) ? match : null;
      },
    };
    const model = await startScriptedModel({
      routes: "llm-proxy",
      turns: () => ({ text: "ok" }),
      isSideCall: () => false,
    });
    try {
      assert.equal(model.anthropicBaseUrl, `${model.url}/anthropic`);
      assert.equal(model.openaiBaseUrl, `${model.url}/openai/v1`);
      for (const [method, route] of samples) {
        const response = await fetch(`${model.url}${route}`, {
          method,
          headers: { "content-type": "application/json" },
          body:
            method === "POST"
              ? JSON.stringify({ model: "m", max_tokens: 10, messages: [{ role: "user", content: "x" }] })
              : undefined,
        });
        const body = await response.text();
        const match = method === "POST" ? proxyRoute.exec(route) : null;
        const configured = ["anthropic", "openai", "scripted"].includes(match?.[1] ?? "");
        assert.equal(
          response.status === 200,
          match !== null && configured,
          `${method} ${route}: ${response.status} ${body}`,
        );
        if (match === null) {
          assert.equal(response.status, 404);
          assert.match(
            body,
            new RegExp(
              `no route for ${method} ${route.replaceAll("/", "\\/")}; model calls are POST \\/\\{provider\\}\\/v1\\/messages`,
            ),
          );
        } else if (!configured) {
          assert.equal(response.status, 404);
          assert.match(body, new RegExp(`no provider named ${match[1]}; configured: anthropic, openai, scripted`));
        }
      }
      // The form the proto comment once promised, with the stack's base URL: the 404 a harness would meet in production.
      const doubled = await fetch(`${model.openaiBaseUrl}/v1/chat/completions`, { method: "POST", body: "{}" });
      assert.equal(doubled.status, 404);
    } finally {
      await model.close();
    }
  });
});

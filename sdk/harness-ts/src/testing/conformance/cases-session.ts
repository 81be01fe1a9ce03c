// Cases about the session itself: the handshake, the protocol version, text,
// the model headers, unknown fields and usage.
import { writeFileSync } from "node:fs";
import path from "node:path";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { allText, checkCompletedNormally, checkSession, eventsOf, stderrHint, stopReasonName } from "./case-checks.js";
import type { ConformanceCase } from "./case-checks.js";
import { check, requestText, runScenario } from "./conformance-scenario.js";

/** A future protocol version no harness of version 1 speaks. */
const FUTURE_VERSION = "PROTOCOL_VERSION_2";

export const SESSION_CASES: readonly ConformanceCase[] = [
  {
    id: "handshake",
    title: "started first with protocol version 1, exactly one result, then exit",
    rule: "rule 1, rule 3",
    level: "required",
    async run(settings) {
      await runScenario(
        settings,
        { id: "handshake", input: "Say hello.", turn: () => ({ text: "Hello from the scripted model." }) },
        (run) => {
          checkCompletedNormally(run);
          check(run.outcome.started !== undefined, "the harness never wrote a started event");
          // One result and the exit after it: every scenario checks them (checkResultAndExit).
        },
      );
    },
  },
  {
    id: "protocol-version",
    title: `refuses a request of another major version (${FUTURE_VERSION}) with a STOP_REASON_ERROR result`,
    rule: "rule 1",
    level: "required",
    anyRoute: true,
    async run(settings) {
      await runScenario(
        settings,
        {
          id: "protocol-version",
          input: "Say hello.",
          protocolVersion: FUTURE_VERSION,
          turn: () => ({ text: "Hello from a future runtime." }),
        },
        (run) => {
          const { result, error } = run.outcome;
          check(
            result !== undefined,
            `the harness wrote no result for a ${FUTURE_VERSION} request${error ? ` (${error.code}: ${error.message})` : ""}; a harness refuses a major version it does not speak by writing a result with STOP_REASON_ERROR${stderrHint(run)}`,
          );
          check(
            result.stopReason === StopReason.ERROR,
            `the harness accepted a ${FUTURE_VERSION} request (its result is ${stopReasonName(result.stopReason)}); a harness refuses a major version it does not speak with STOP_REASON_ERROR`,
          );
          check(
            run.modelRequests.length === 0,
            `the harness called the model ${run.modelRequests.length} time(s) for a ${FUTURE_VERSION} request it should have refused`,
          );
        },
      );
    },
  },
  {
    id: "text",
    title: "the model's text reaches the runtime as text events and the result",
    rule: "TextEvent, SessionResult.text",
    level: "required",
    async run(settings) {
      const answer = "The answer is 42, said the scripted model.";
      await runScenario(
        settings,
        { id: "text", input: "What is the answer?", turn: () => ({ text: answer }) },
        (run) => {
          checkCompletedNormally(run);
          check(
            allText(run.events).includes(answer),
            `no text event carried the model's text ${JSON.stringify(answer)}`,
          );
          check(
            run.outcome.result?.text.includes(answer),
            `the result's text ${JSON.stringify(run.outcome.result?.text)} is not the model's final text`,
          );
        },
      );
    },
  },
  {
    id: "model-headers",
    title: "every model call carries Oz0-Job, Oz0-Agent and the session token, and no other credential",
    rule: "rule 4",
    level: "required",
    async run(settings) {
      await runScenario(
        settings,
        {
          id: "model-headers",
          input: "Read notes.txt, then answer.",
          // With tools, a second call (after a tool result) is checked too.
          turn: (_request, { profile, hasTools, workDir, call }) => {
            if (call === 1 && hasTools) {
              writeFileSync(path.join(workDir, "notes.txt"), "some notes");
              return {
                toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "notes.txt") }],
              };
            }
            return { text: "Done reading." };
          },
        },
        (run) => {
          checkSession(run);
          check(run.allRequests.length > 0, "the harness made no model call");
          // A key in the kit's own environment must never get through (the harness's environment has none).
          const forbidden = [process.env.ANTHROPIC_API_KEY, process.env.OPENAI_API_KEY].filter(
            (key): key is string => typeof key === "string" && key.length >= 8 && key !== run.token,
          );
          for (const [index, request] of run.allRequests.entries()) {
            const where = `model call ${index + 1} (${request.method} ${request.path})`;
            const h = request.headers;
            check(
              h["oz0-job"] === run.jobId,
              `${where} has Oz0-Job ${JSON.stringify(h["oz0-job"] ?? null)}, expected ${JSON.stringify(run.jobId)}`,
            );
            check(
              h["oz0-agent"] === run.agentHeader,
              `${where} has Oz0-Agent ${JSON.stringify(h["oz0-agent"] ?? null)}, expected ${JSON.stringify(run.agentHeader)}`,
            );
            const sent = JSON.stringify(h) + requestText(request);
            check(
              !forbidden.some((key) => sent.includes(key)),
              `${where} sent a provider key from the kit's environment; harnesses use only the session token`,
            );
            check(
              h["x-api-key"] === run.token || h.authorization === `Bearer ${run.token}`,
              `${where} does not carry the session token as x-api-key or Authorization: Bearer`,
            );
            check(
              h["x-api-key"] === undefined || h["x-api-key"] === run.token,
              `${where} sends an x-api-key that is not the session token (a provider key?); the only credential is the session token`,
            );
            check(
              h.authorization === undefined || h.authorization === `Bearer ${run.token}`,
              `${where} sends an Authorization header that is not "Bearer <session token>" (a provider key?); the only credential is the session token`,
            );
          }
        },
      );
    },
  },
  {
    id: "unknown-fields",
    title: "unknown fields in the request and in answers are ignored",
    rule: "rule 2",
    level: "required",
    async run(settings) {
      await runScenario(
        settings,
        {
          id: "unknown-fields",
          input: "Read notes.txt.",
          permissions: true,
          injectUnknownFields: true,
          // With tools, the permission answer carries unknown fields too.
          turn: (_request, { profile, hasTools, workDir, call }) => {
            if (call > 1 || !hasTools) return { text: "Unknown fields were ignored." };
            writeFileSync(path.join(workDir, "notes.txt"), "notes");
            return {
              toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "notes.txt") }],
            };
          },
        },
        (run) => {
          checkCompletedNormally(run);
          check(
            run.outcome.result?.text.includes("Unknown fields were ignored."),
            "the harness did not finish normally when the request and answers carried unknown fields",
          );
        },
      );
    },
  },
  {
    id: "usage",
    title: "usage events for model calls, usage totals and turns in the result",
    rule: "Usage, SessionResult.usage and turns",
    level: "recommended",
    async run(settings) {
      await runScenario(
        settings,
        {
          id: "usage",
          input: "Read notes.txt, then answer.",
          turn: (_request, { profile, hasTools, workDir, call }) => {
            if (call === 1 && hasTools) {
              writeFileSync(path.join(workDir, "notes.txt"), "some notes");
              return {
                toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "notes.txt") }],
                usage: { input: 120, output: 30 },
              };
            }
            return { text: "Counted.", usage: { input: 150, output: 12 } };
          },
        },
        (run) => {
          checkCompletedNormally(run);
          const usage = eventsOf(run.events, "usage").map((e) => e.value);
          check(
            usage.length > 0,
            "the harness wrote no usage event; report each model call's tokens (input, output, cache) with a usage event",
          );
          check(
            usage.some((u) => u.inputTokens > 0n && u.outputTokens > 0n),
            `no usage event has input and output tokens (got ${usage.map((u) => `${u.inputTokens}/${u.outputTokens}`).join(", ")}); take them from the model's answer`,
          );
          const result = run.outcome.result;
          const totals = result?.usage ?? [];
          check(
            totals.length > 0,
            "the result carries no usage; SessionResult.usage holds the session's totals per model",
          );
          check(
            totals.some((u) => u.inputTokens > 0n && u.outputTokens > 0n),
            "the result's usage has no input and output tokens",
          );
          const calls = run.modelRequests.length;
          check(
            result?.turns === calls,
            `the result's turns is ${result?.turns}, but the harness made ${calls} model call(s); turns counts the model calls of the session`,
          );
        },
      );
    },
  },
];

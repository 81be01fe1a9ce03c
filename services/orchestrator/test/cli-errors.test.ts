// The one line oz0 prints when a command fails: it says what happened and what to do, and the advice fits
// how the orchestrator was found (an operator under `oz0 dev` never set OZ0_URL, so is not told to unset it).
import assert from "node:assert/strict";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { connectNodeAdapter, createGrpcTransport } from "@connectrpc/connect-node";
import { JobService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { describeError } from "../src/cli/cli-error.js";

const refused = new ConnectError("connect ECONNREFUSED 127.0.0.1:7700", Code.Unavailable);

void test("an orchestrator `oz0 dev` runs that refuses a connection may be restarting; OZ0_URL is not mentioned", () => {
  const text = describeError(refused, { target: "http://127.0.0.1:7700", mode: "dev" });
  assert.match(text, /^could not reach the orchestrator at http:\/\/127\.0\.0\.1:7700 \(connection refused\): /);
  assert.match(text, /may be restarting/);
  assert.doesNotMatch(text, /OZ0_URL/);
  assert.doesNotMatch(text, /start it with/);
});

void test("an orchestrator named by OZ0_URL that refuses a connection: the advice names OZ0_URL", () => {
  const text = describeError(refused, { target: "http://10.0.0.5:7700", mode: "url" });
  assert.match(text, /unset OZ0_URL/);
});

void test("before a connection is made (no mode), OZ0_URL is not mentioned", () => {
  const text = describeError(refused, { target: "the orchestrator" });
  assert.doesNotMatch(text, /OZ0_URL/);
  assert.match(text, /may be restarting/);
});

void test("an orchestrator that answers Unavailable is not said to be unreachable: its own message is shown", async (t) => {
  const message = "the LLM proxy at http://127.0.0.1:7701 is unreachable: connect ECONNREFUSED 127.0.0.1:7701";
  const server = http2.createServer(
    connectNodeAdapter({
      routes: (router) =>
        router.service(JobService, {
          listJobs() {
            throw new ConnectError(message, Code.Unavailable);
          },
        }),
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => server.close());
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // The CLI's own transport (cli/connection.ts): gRPC over HTTP/2.
  const failed = await createClient(JobService, createGrpcTransport({ baseUrl: url }))
    .listJobs({})
    .then(
      () => assert.fail("the call was answered with an error"),
      (error: unknown) => error,
    );
  assert.equal(describeError(failed, { target: url, mode: "dev" }), message);
  // The same call to a port nobody listens on never got an answer.
  const closed = await createClient(JobService, createGrpcTransport({ baseUrl: "http://127.0.0.1:1" }))
    .listJobs({})
    .then(
      () => assert.fail("nothing listens there"),
      (error: unknown) => error,
    );
  assert.match(
    describeError(closed, { target: "http://127.0.0.1:1", mode: "dev" }),
    /^could not reach the orchestrator at http:\/\/127\.0\.0\.1:1 \(connection refused\)/,
  );
});

void test("an ingress answering 503 while the orchestrator restarts is not the orchestrator's answer: the advice stays", async (t) => {
  const ingress = http2.createServer((_request, response) => {
    response.writeHead(503, { "content-type": "text/html" });
    response.end("<html>503 Service Temporarily Unavailable</html>");
  });
  await new Promise<void>((resolve) => ingress.listen(0, "127.0.0.1", resolve));
  t.after(() => ingress.close());
  const url = `http://127.0.0.1:${(ingress.address() as AddressInfo).port}`;
  const failed = await createClient(JobService, createGrpcTransport({ baseUrl: url }))
    .listJobs({})
    .then(
      () => assert.fail("the ingress answered 503"),
      (error: unknown) => error,
    );
  assert.match(
    describeError(failed, { target: url, mode: "url" }),
    /^could not reach the orchestrator at .*: check that it runs/,
  );
});

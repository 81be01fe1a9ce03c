// The least any Node.js proxy can cost: a bare HTTP forwarder (no auth, no
// metering, no parsing) in its own process, the baseline that
// llm-proxy-latency.ts measures the LLM proxy against besides the direct call.
// It sends each request to the same path at the upstream (`/v1/messages`,
// `/v1/chat/completions`, `/v1/responses`) and pipes the answer back.
// Prints its URL as a JSON line; answers serveRoleControl's commands on stdin.
import http from "node:http";
import { serveRoleControl } from "./llm-proxy-role-process.js";

const upstream = new URL(process.argv[2] ?? "http://127.0.0.1:1");
const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
const server = http.createServer((req, res) => {
  const parts: Buffer[] = [];
  req.on("data", (c: Buffer) => parts.push(c));
  req.on("end", () => {
    const body = Buffer.concat(parts);
    const headers = {
      "content-type": "application/json",
      "content-length": String(body.length),
      "x-api-key": "sk-bench",
    };
    const up = http.request(new URL(req.url ?? "/", upstream), { method: "POST", agent, headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, { "content-type": String(answer.headers["content-type"]) });
      answer.pipe(res);
    });
    up.on("error", () => res.destroy());
    up.end(body);
  });
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(
    `${JSON.stringify({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}` })}\n`,
  );
});
serveRoleControl();

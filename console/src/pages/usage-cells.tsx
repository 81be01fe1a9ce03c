// The columns of a usage table, the same on a job's page and on the usage
// page: calls, failed calls, tokens in and out, cost.
import type { Usage } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { count, usd } from "../format.js";

export function UsageHeads() {
  return (
    <>
      <th scope="col">Calls</th>
      <th scope="col">Failed</th>
      <th scope="col">Tokens in</th>
      <th scope="col">Tokens out</th>
      <th scope="col">Cost</th>
    </>
  );
}

export function UsageCells({ usage }: { usage: Usage | undefined }) {
  return (
    <>
      <td>{count(usage?.calls ?? 0n)}</td>
      <td>{count(usage?.failedCalls ?? 0n)}</td>
      <td>{count(usage?.inputTokens ?? 0n)}</td>
      <td>{count(usage?.outputTokens ?? 0n)}</td>
      <td>{usd(usage?.costUsd ?? 0)}</td>
    </>
  );
}

// Run the conformance kit from code (the CLI prints the same report).
import { formatCaseLine, formatSummary, runConformance } from "@oz0/harness/testing";

export async function checkConformance(command: string[]): Promise<boolean> {
  const report = await runConformance({
    command,
    graceMs: 5_000,
    // A burn-down list: these may fail for now; one that starts passing fails the run until removed.
    expectedFailures: [],
  });
  for (const result of report.cases) console.log(formatCaseLine(result));
  console.log(formatSummary(report)); // exactly "N passed, N failed"
  return report.ok;
}

// The runner's check that every test file's results arrived whole.
// Each file's process ends its report with a summary of what it ran. The
// default export is a reporter (`--test-reporter`) that records, for each
// file, that summary beside the results that reached the runner: one JSON line
// per file, in the file named by OZ0_TEST_FILE_SUMMARIES, written
// synchronously as each summary arrives, so a runner that exits at once loses
// none. `fileSummaryProblems` then names every file whose summary never came or
// does not match what was received.
// Why: a file's process that exits before its last results reach the runner
// (a forced exit with its stdout still queued, nodejs/node#64833, or a
// process.exit() in code under test) ends at exit code 0, and Node's runner
// reports only what it heard: its failures too went missing, and the run
// passed.
import { appendFileSync, readFileSync } from "node:fs";
import path from "node:path";

export default async function* fileSummaries(source) {
  const record = process.env.OZ0_TEST_FILE_SUMMARIES;
  /** Results received per test file: leaves (`tests`) and suites, as a summary counts them. */
  const received = new Map();
  for await (const { type, data } of source) {
    // Only what a file's own process sent names the file it ran (entryFile); a
    // test declared in a helper module is that helper's `file`.
    const file = data?.entryFile;
    if (record === undefined || file === undefined) continue;
    if (type === "test:pass" || type === "test:fail") {
      const counts = received.get(file) ?? { tests: 0, suites: 0 };
      if (data.details?.type === "suite") counts.suites++;
      else counts.tests++;
      received.set(file, counts);
    } else if (type === "test:summary") {
      const { tests, suites } = data.counts;
      const line = { file, ran: { tests, suites }, received: received.get(file) ?? { tests: 0, suites: 0 } };
      appendFileSync(record, `${JSON.stringify(line)}\n`);
    }
  }
}

/**
 * What went missing, one line per test file (paths from `root`): a file with
 * no summary, or whose summary counts other results than arrived. Empty when
 * every file's results arrived whole.
 */
export function fileSummaryProblems({ record, files, root }) {
  let text = "";
  try {
    text = readFileSync(record, "utf8");
  } catch {
    // no summary at all: every file is named below
  }
  const summaries = new Map(
    text
      .split("\n")
      .filter(Boolean)
      .map((line) => JSON.parse(line))
      .map((summary) => [summary.file, summary]),
  );
  const problems = [];
  for (const file of files) {
    const name = path.relative(root, file);
    const summary = summaries.get(file);
    if (summary === undefined) {
      problems.push(
        `${name}: its summary never reached the runner, so some of its results may be missing (a file that declares no test sends none: declare at least one)`,
      );
      continue;
    }
    const { ran, received } = summary;
    if (ran.tests !== received.tests || ran.suites !== received.suites) {
      problems.push(
        `${name}: ran ${ran.tests} tests in ${ran.suites} suites, but the runner received ${received.tests} tests in ${received.suites} suites`,
      );
    }
  }
  return problems;
}

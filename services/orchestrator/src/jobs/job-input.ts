// What a job may be started with: its input is a prompt, not a payload, and
// its attachments are files on the orchestrator's host, bounded because the
// sandbox copies them into every session of the job.
import { existsSync, lstatSync, readdirSync } from "node:fs";
import path from "node:path";
import { invalidArgument } from "../orchestrator-error.js";

/** A job's input is a prompt, not a payload: larger material goes in an attachment. */
export const MAX_JOB_INPUT_BYTES = 2 * 1024 * 1024;
/** What a job's attachments may add up to; the sandbox copies them into every session of the job. */
export const MAX_ATTACHMENT_BYTES = 256 * 1024 * 1024;

export function checkJobInput(input: string): void {
  const bytes = Buffer.byteLength(input);
  if (bytes > MAX_JOB_INPUT_BYTES) {
    throw invalidArgument(
      `the job's input is ${bytes} bytes; at most ${MAX_JOB_INPUT_BYTES} (2 MiB) are taken: put larger material in a file and pass it with --attach`,
    );
  }
}

/** Walks the attachments (symbolic links are not followed) and refuses them past MAX_ATTACHMENT_BYTES. */
function checkAttachmentsSize(paths: readonly string[]): void {
  let total = 0;
  const walk = (p: string): void => {
    const stat = lstatSync(p);
    if (stat.isDirectory()) for (const entry of readdirSync(p)) walk(path.join(p, entry));
    else if (stat.isFile()) total += stat.size;
    if (total > MAX_ATTACHMENT_BYTES) {
      throw invalidArgument(
        `the job's attachments add up to more than ${MAX_ATTACHMENT_BYTES} bytes (256 MiB); attach less, or give the agent a way to fetch what it needs`,
      );
    }
  };
  for (const p of paths) walk(p);
}

/** A job's attachments, checked: absolute paths that exist on the orchestrator's host, within MAX_ATTACHMENT_BYTES. */
export function checkAttachments(attachments: readonly string[]): string[] {
  const checked = attachments.map((a) => {
    if (!path.isAbsolute(a))
      throw invalidArgument(`attachment ${a} is not an absolute path; pass absolute paths on the orchestrator's host`);
    if (!existsSync(a))
      throw invalidArgument(`attachment ${a} does not exist on the orchestrator's host; check the path`);
    return a;
  });
  checkAttachmentsSize(checked);
  return checked;
}

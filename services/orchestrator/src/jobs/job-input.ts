// What a job may be started with: its input is a prompt, not a payload, and
// its attachments are files on the orchestrator's host, bounded because the
// sandbox copies them into every session of the job.
//
// An attachment is read by the suite's own processes, not by the person
// who names it, and its content goes to the agent and back out in results
// and artifacts. So naming a path is a privilege: an admin may attach any
// path but the orchestrator's own data directory (its credentials, stores
// and, embedded, the sandbox's sessions); anyone else only paths inside
// the folders the orchestrator names for it (OZ0_ATTACHMENT_ROOTS).
import { existsSync, lstatSync, readdirSync, realpathSync } from "node:fs";
import path from "node:path";
import { invalidArgument } from "../orchestrator-error.js";
import { isWithin } from "../path-within.js";

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

/** Who attaches, and where from. */
export interface AttachmentPolicy {
  /** The orchestrator's data directory: never attached, nor any folder holding it. */
  home: string;
  /** Folders anyone who may run a job may attach from (OZ0_ATTACHMENT_ROOTS). */
  roots: readonly string[];
  /** The caller is an admin: any path but `home`. */
  anywhere: boolean;
}

/**
 * A job's attachments, checked: absolute paths that exist on the
 * orchestrator's host, that the caller may attach (AttachmentPolicy), within
 * MAX_ATTACHMENT_BYTES. Links are resolved before the checks: a link is
 * judged by what it leads to.
 */
export function checkAttachments(attachments: readonly string[], policy: AttachmentPolicy): string[] {
  const home = existsSync(policy.home) ? realpathSync(policy.home) : path.resolve(policy.home);
  const roots = policy.roots.flatMap((root) => (existsSync(root) ? [realpathSync(root)] : []));
  const checked = attachments.map((a) => {
    if (!path.isAbsolute(a))
      throw invalidArgument(`attachment ${a} is not an absolute path; pass absolute paths on the orchestrator's host`);
    if (!existsSync(a))
      throw invalidArgument(`attachment ${a} does not exist on the orchestrator's host; check the path`);
    const real = realpathSync(a);
    if (isWithin(real, home) || isWithin(home, real))
      throw invalidArgument(
        `attachment ${a} is, or holds, the orchestrator's data directory (${policy.home}: its credentials and stores); attach the files the agent needs from somewhere else`,
      );
    if (!policy.anywhere && !roots.some((root) => isWithin(real, root)))
      throw invalidArgument(
        roots.length === 0
          ? `attachment ${a}: only an admin may attach files of the orchestrator's host here; an admin can name folders anyone may attach from with OZ0_ATTACHMENT_ROOTS`
          : `attachment ${a} is outside the folders attachments may come from (OZ0_ATTACHMENT_ROOTS: ${policy.roots.join(", ")}); move it into one, or ask an admin`,
      );
    return a;
  });
  checkAttachmentsSize(checked);
  return checked;
}

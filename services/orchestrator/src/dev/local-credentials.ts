// Credentials kept on this machine, under the data directory:
// - the owner's (credentials/owner): made once by the embedded stack or
//   `oz0 dev`, every role, used by the CLI on this machine with no step from
//   the person;
// - a login (credentials/login.json): `oz0 login` for a remote orchestrator.
// The folder is 0700 and each file 0600: a session running as another user
// (or under bubblewrap, where the folder is not visible) cannot read them.
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
  type Stats,
} from "node:fs";
import path from "node:path";
import { newCredential } from "@oz0/serving";

/**
 * Refuses a data directory (or a link to one) that another user owns, or that every user may write: whoever may
 * write there could have put files oz0 trusts (credentials/owner, which the stack then accepts as its owner;
 * dev.json or login.json, where commands send their credential and a secret's value) or links that oz0, as its
 * user, writes through (dev.pid led to a file of root's, which `oz0 dev` run as root overwrote). A name in /tmp
 * (OZ0_HOME=/tmp/oz0) is anybody's to make first, a `user`-mode session's too (attacker review). A home that is not
 * there yet is made by the stack, its own.
 */
export function assertOwnHome(home: string): void {
  const entry = lstatSync(home, { throwIfNoEntry: false });
  if (!entry) return;
  const target = entry.isSymbolicLink() ? statSync(home, { throwIfNoEntry: false }) : entry;
  const problem = strangersProblem(entry, target);
  if (problem === undefined) return;
  throw new Error(
    `the data directory ${home} (OZ0_HOME) ${problem}, so whoever may write there could have put files oz0 would trust (a credential, a stack's address) or links it would write through; use a data directory of your own: unset OZ0_HOME (~/.oz0), or OZ0_HOME=$(mktemp -d)`,
  );
}

/**
 * Why a folder (`entry`, and what it leads to when it is a link) is not this user's to trust: another user than this
 * one and root owns it, or every user may write it; undefined when it is, or where there are no uids.
 */
export function strangersProblem(entry: Stats, target: Stats | undefined = entry): string | undefined {
  const own = process.geteuid?.();
  if (own === undefined) return undefined;
  const stranger = [entry, target].find((stat) => stat !== undefined && stat.uid !== own && stat.uid !== 0);
  if (stranger) return `belongs to uid ${stranger.uid}, neither this user's (${own}) nor root's`;
  return target && (target.mode & 0o002) !== 0 ? "may be written by every user" : undefined;
}

export function credentialsDir(home: string): string {
  return path.join(home, "credentials");
}

export function ensureCredentialsDir(home: string): string {
  assertOwnHome(home);
  const dir = credentialsDir(home);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // A folder made before (or by a wider umask) is narrowed too.
  chmodSync(dir, 0o700);
  return dir;
}

/** The owner's credential, made on first use. */
export function ensureOwnerCredential(home: string): string {
  const existing = readOwnerCredential(home);
  if (existing) return existing;
  const file = path.join(ensureCredentialsDir(home), "owner");
  const token = newCredential();
  // `wx`: two stacks starting at once on one home keep the first one's.
  try {
    writeFileSync(file, `${token}\n`, { mode: 0o600, flag: "wx" });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  return readOwnerCredential(home)!;
}

export function readOwnerCredential(home: string): string | undefined {
  try {
    return readFileSync(path.join(credentialsDir(home), "owner"), "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}

export interface Login {
  url: string;
  token: string;
}

function loginFile(home: string): string {
  return path.join(credentialsDir(home), "login.json");
}

export function readLogin(home: string): Login | undefined {
  const file = loginFile(home);
  if (!existsSync(file)) return undefined;
  const value = JSON.parse(readFileSync(file, "utf8")) as Partial<Login>;
  if (typeof value.url !== "string" || typeof value.token !== "string") {
    throw new Error(`${file} is not a login (url and token); run \`oz0 login\` again or \`oz0 logout\``);
  }
  return { url: value.url, token: value.token };
}

export function writeLogin(home: string, login: Login): void {
  const file = loginFile(home);
  ensureCredentialsDir(home);
  rmSync(file, { force: true });
  writeFileSync(file, `${JSON.stringify(login)}\n`, { mode: 0o600, flag: "wx" });
}

export function removeLogin(home: string): boolean {
  const file = loginFile(home);
  const had = existsSync(file);
  rmSync(file, { force: true });
  return had;
}
